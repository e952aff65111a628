# reward 1 when /app/notes.txt is exactly the given lines
notes_are() { [ "$(cat /app/notes.txt 2>/dev/null)" = "$(printf '%s\n' "$@")" ]; }
