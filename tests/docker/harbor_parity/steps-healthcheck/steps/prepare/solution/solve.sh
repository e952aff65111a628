#!/bin/bash
touch /app/go
