#!/bin/bash
# both steps run the task's solution: one more line each
echo done >> /app/progress.txt
