#!/bin/bash
touch /app/first.txt
