#!/usr/bin/env bash
# Build and test relperception the way a ROS 2 system does: colcon build + colcon test
# (pytest, ament_flake8, ament_pep257 and the project's own checks), in the .venv that
# `make test` created. Usage: scripts/test.sh [extra pytest args, e.g. -k ncc]
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
VENV=$ROOT/.venv
export PATH="$VENV/bin:$PATH"
export VIRTUAL_ENV=$VENV
# The Jazzy wheels install their ament index into the venv; install/setup.bash would not add it.
export AMENT_PREFIX_PATH="$VENV${AMENT_PREFIX_PATH:+:$AMENT_PREFIX_PATH}"
export ROS_LOG_DIR=${ROS_LOG_DIR:-$ROOT/log/ros}
export MPLBACKEND=Agg

colcon build --base-paths "$ROOT" --build-base build --install-base install \
  --packages-select relperception --event-handlers console_cohesion- summary+
# shellcheck disable=SC1091
set +u; source install/local_setup.bash; set -u
export AMENT_PREFIX_PATH="$ROOT/install/relperception:$AMENT_PREFIX_PATH"

pytest_args="-q -ra $*"
colcon test --base-paths "$ROOT" --build-base build --install-base install \
  --packages-select relperception --return-code-on-test-failure \
  --event-handlers console_direct+ --pytest-args $pytest_args
colcon test-result --test-result-base build/relperception --all
