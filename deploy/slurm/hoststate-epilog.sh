#!/bin/sh
# slurm.conf epilog: hoststate/slurm.py
exec /usr/bin/python3 -m hoststate.slurm epilog --config /etc/hoststate/slurm.toml
