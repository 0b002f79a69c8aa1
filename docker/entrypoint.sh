#!/usr/bin/env bash
# Source ROS 2 and the relperception workspace, then run the given command
# (default: ros2 launch relperception perception.launch.py).
set -e
ROS_ROOT=${ROS_ROOT:-/opt/ros/${ROS_DISTRO:-jazzy}}
# jetson-containers builds ROS 2 from source into $ROS_ROOT/install; apt installs use $ROS_ROOT.
if [ -f "$ROS_ROOT/install/setup.bash" ]; then
    # shellcheck disable=SC1091
    source "$ROS_ROOT/install/setup.bash"
else
    # shellcheck disable=SC1091
    source "$ROS_ROOT/setup.bash"
fi
# shellcheck disable=SC1091
source /ws/install/setup.bash
if [ $# -eq 0 ]; then
    set -- ros2 launch relperception perception.launch.py
fi
exec "$@"
