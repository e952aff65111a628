#!/bin/bash
id -un > /app/first.txt
