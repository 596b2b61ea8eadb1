#!/bin/sh
# slurm.conf Prolog (root, at allocation): hoststate/slurm.py, docs/fleets-engines.md "Slurm".
# Runs hoststate.slurm with the Python of the virtualenv hoststate was installed into (README: pip install .):
# /opt/hoststate, or the one a line HOSTSTATE_VENV=DIR in hoststate-slurm.env beside this script names (and
# HOSTSTATE_SLURM_CONFIG=FILE another configuration). Shell built-ins only: slurmd gives scripts no PATH to rely on.
# Python runs isolated (-I): no PYTHON* variable (the task prolog gets the job's environment: a PYTHONPATH or
# PYTHONHOME of the job's) and no working-directory module reaches it.
venv=/opt/hoststate
config=/etc/hoststate/slurm.toml
if [ -r "${0%/*}/hoststate-slurm.env" ]; then
    while IFS='=' read -r key value; do
        case $key in
            HOSTSTATE_VENV) venv=$value ;;
            HOSTSTATE_SLURM_CONFIG) config=$value ;;
        esac
    done < "${0%/*}/hoststate-slurm.env"
fi
exec "$venv/bin/python" -I -m hoststate.slurm prolog --config "$config"
