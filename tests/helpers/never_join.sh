#!/bin/sh
# Stands in for a python that never gets the worker to join the cluster.
echo "stuck before joining: $*"
exec sleep 3600
