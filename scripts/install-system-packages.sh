#!/usr/bin/env bash
# Install the system packages bobox-sched and its tests need, where missing (Debian/Ubuntu).
# Checked against a minimal Debian 12 (debootstrap --variant=minbase, plus python3, make and
# git) by scripts/debian-check (= scripts/fresh-check --debian): everything `make run` and
# `make test` need beyond it is listed here.
#
#   libnuma1                 node-local memory (numa_alloc_onnode, move_pages)
#   openjdk-17-jre-headless  Spark (PySpark starts its own JVM)
#   qemu-system-x86          NUMA-VM test tier (software emulation, no KVM needed)
#   linux-image-amd64        the kernel the NUMA-VM tier boots
#   busybox-static           virtme-ng's initramfs needs a statically linked busybox
#   file                     virtme-ng reads the kernel's version with `file` (else `strings`,
#                            binutils); without either, vng dies with FileNotFoundError
#   python3-venv             `python3 -m venv` on Debian's own python3 (ensurepip)
#
# Not needed, although a minimal Debian lacks them: procps (ps), iproute2 (ip), sudo,
# locales (Python uses C.UTF-8), a compiler (every pip dependency has a wheel; pyspark is a
# pure-Python sdist). ca-certificates comes with Java. The checks below must also work for a
# user whose PATH lacks the sbin folders (Debian's default for non-root users), where
# ldconfig lives: hence the PATH line.
#
# Usage: install-system-packages.sh [PYTHON]   (PYTHON: the interpreter make will use)
# Needs root (or sudo) only when something is missing.
set -euo pipefail

PYTHON=${1:-python3}
PATH="$PATH:/usr/sbin:/sbin"   # ldconfig; a non-root Debian user's PATH has no sbin folder
missing=()
have_pkg() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q "install ok installed"; }

ldconfig -p 2>/dev/null | grep -q 'libnuma\.so\.1' || missing+=(libnuma1)
command -v java >/dev/null 2>&1 || missing+=(openjdk-17-jre-headless)
command -v qemu-system-x86_64 >/dev/null 2>&1 || missing+=(qemu-system-x86)
ls /boot/vmlinuz-* >/dev/null 2>&1 || missing+=(linux-image-amd64)
command -v file >/dev/null 2>&1 || missing+=(file)
# virtme-ng looks for busybox-static (or a static busybox) on PATH.
if ! command -v busybox-static >/dev/null 2>&1 && ! have_pkg busybox-static; then
    missing+=(busybox-static)
fi
# Debian splits ensurepip out of python3: `python3 -m venv` fails without python3-venv.
# Only Debian's own interpreter needs it (pyenv & co. ship ensurepip).
if command -v "$PYTHON" >/dev/null 2>&1 && ! "$PYTHON" -c 'import ensurepip, venv' >/dev/null 2>&1; then
    case "$(command -v "$PYTHON")" in
        /usr/bin/*) missing+=("python3-venv") ;;
        *) echo "error: $PYTHON has no ensurepip/venv module; use an interpreter that has (make PYTHON=...)" >&2; exit 1 ;;
    esac
fi

if [ ${#missing[@]} -eq 0 ]; then
    exit 0
fi
if ! command -v apt-get >/dev/null 2>&1; then
    echo "error: missing system packages (${missing[*]}) and no apt-get to install them; install the equivalents" >&2
    exit 1
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
