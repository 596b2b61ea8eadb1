#!/bin/sh
# slurm.conf prolog: hoststate/slurm.py
exec /usr/bin/python3 -m hoststate.slurm prolog --config /etc/hoststate/slurm.toml
