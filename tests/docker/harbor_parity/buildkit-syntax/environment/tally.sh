#!/bin/sh
# Sums the numbers of its input file, one per line.
total=0
while read -r n; do total=$((total + n)); done < "$1"
echo "$total"
