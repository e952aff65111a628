#!/bin/bash
tally /app/data/numbers.txt > /app/sum.txt
