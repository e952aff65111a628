#!/bin/bash
touch /app/$(ls /app | wc -l).txt
