#!/bin/bash
touch /app/last.txt
