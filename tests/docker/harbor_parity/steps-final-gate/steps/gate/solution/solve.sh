#!/bin/bash
touch /app/gate.txt
