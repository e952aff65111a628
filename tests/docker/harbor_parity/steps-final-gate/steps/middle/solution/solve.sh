#!/bin/bash
touch /app/middle.txt
