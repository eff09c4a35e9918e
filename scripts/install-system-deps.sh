#!/bin/sh
# Debian packages the test suite runs for real: gcc for the native kernels (and their ASan/UBSan build), the Prometheus server and promtool,
# mtail (benchmarks), Chromium (status page screenshots), logrotate (rotation soak test), Alertmanager and amtool
# (the inhibit rules of deploy/alertmanager/). Installs only what is missing.
set -eu
PACKAGES="gcc prometheus prometheus-alertmanager mtail chromium logrotate"
missing=""
for package in $PACKAGES; do
    dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed" || missing="$missing $package"
done
[ -z "$missing" ] && exit 0
SUDO=""
[ "$(id -u)" -ne 0 ] && SUDO="sudo"
echo "installing Debian packages:$missing"
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends $missing >/dev/null
