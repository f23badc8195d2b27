#!/usr/bin/env bash
# Install the system packages bobox-sched and its tests need, where missing:
#   libnuma1            node-local memory (numa_alloc_onnode, move_pages)
#   openjdk-17-jre      Spark (PySpark starts its own JVM)
#   qemu-system-x86     NUMA-VM test tier
#   linux-image-amd64   the kernel the NUMA-VM tier boots
# Needs root (or sudo) only when something is missing.
set -euo pipefail

missing=()
ldconfig -p 2>/dev/null | grep -q 'libnuma\.so\.1' || missing+=(libnuma1)
command -v java >/dev/null 2>&1 || missing+=(openjdk-17-jre-headless)
command -v qemu-system-x86_64 >/dev/null 2>&1 || missing+=(qemu-system-x86)
ls /boot/vmlinuz-* >/dev/null 2>&1 || missing+=(linux-image-amd64)

if [ ${#missing[@]} -eq 0 ]; then
    exit 0
fi
echo "installing system packages: ${missing[*]}" >&2
SUDO=""
if [ "$(id -u)" -ne 0 ]; then
    if command -v sudo >/dev/null 2>&1; then SUDO=sudo; else
        echo "error: need root to install ${missing[*]} (apt-get)" >&2; exit 1
    fi
fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
