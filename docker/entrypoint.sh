#!/usr/bin/env bash
# Source ROS 2 and the relperception workspace, then run the given command.
set -e
# shellcheck disable=SC1091
source /opt/ros/jazzy/setup.bash
# shellcheck disable=SC1091
source /ws/install/setup.bash
exec "$@"
