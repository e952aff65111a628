#!/bin/bash
echo gamma >> /app/notes.txt
