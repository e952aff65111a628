#!/bin/bash
[ -f /app/go ] && touch /app/ready
true
