#!/bin/sh
# slurm.conf task-prolog: hoststate/slurm.py
exec /usr/bin/python3 -m hoststate.slurm task-prolog --config /etc/hoststate/slurm.toml
