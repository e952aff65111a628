#!/bin/bash
touch /app/out.txt
