#!/bin/bash
id -un > /app/second.txt
