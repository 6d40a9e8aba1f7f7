#!/usr/bin/env bash
# Builds a small root file system for the image tests: the host's python3
# (/usr/bin/python3.11), the libraries it loads, its standard library and a
# marker file /etc/sv-image-marker holding MARKER. Nothing else of the host.
# Usage: make_rootfs.sh DIR MARKER
set -euo pipefail
dir=$1
marker=$2
py=$(readlink -f /usr/bin/python3)
mkdir -p "$dir"/usr/bin "$dir"/usr/lib/x86_64-linux-gnu "$dir"/usr/lib64 \
         "$dir"/etc "$dir"/tmp "$dir"/proc "$dir"/dev "$dir"/root
chmod 1777 "$dir"/tmp
ln -sfn usr/bin "$dir"/bin
ln -sfn usr/lib "$dir"/lib
ln -sfn usr/lib64 "$dir"/lib64
cp -a "$py" "$dir"/usr/bin/
ln -sfn "$(basename "$py")" "$dir"/usr/bin/python3
# The interpreter's libraries and those of its extension modules (ctypes:
# libffi, ssl, sqlite3, ...).
stdlib=/usr/lib/$(basename "$py")
for lib in $(ldd "$py" "$stdlib"/lib-dynload/*.so 2>/dev/null |
             awk '/=>/ && $3 ~ /^\// {print $3} /ld-linux/ {print $1}' |
             sort -u); do
  real=$(readlink -f "$lib")
  case "$lib" in
    */ld-linux*) cp "$real" "$dir"/usr/lib64/"$(basename "$lib")" ;;
    *) cp "$real" "$dir"/usr/lib/x86_64-linux-gnu/"$(basename "$lib")" ;;
  esac
done
mkdir -p "$dir$stdlib"
# The standard library without its tests, bytecode kept (start-up speed).
(cd "$stdlib" && tar cf - --exclude=./test --exclude=./idlelib \
   --exclude=./tkinter --exclude=./lib2to3 --exclude=./ensurepip .) |
  (cd "$dir$stdlib" && tar xf -)
echo "$marker" > "$dir"/etc/sv-image-marker
