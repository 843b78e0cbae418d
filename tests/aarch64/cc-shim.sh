#!/bin/sh
# `cc` inside the aarch64 test VM, which has no compiler. The one test that compiles at run time
# (breadcrumb/cabi/tests/c_abi.rs) builds tests/c/writer.c against the staticlib or the cdylib; run.sh builds
# both programs on the host with aarch64-linux-gnu-gcc and the test's own flags, and this hands out the one
# asked for. Any other compile is refused, loudly.
out=
kind=shared
prev=
for arg in "$@"; do
  case $arg in
    --version) echo "cc-shim (prebuilt by tests/aarch64/run.sh)"; exit 0 ;;
    *libwedge_breadcrumb.a) kind=static ;;
  esac
  [ "$prev" = -o ] && out=$arg
  prev=$arg
done
case " $* " in
  *"/tests/c/writer.c "*) ;;
  *) echo "cc-shim: only breadcrumb's tests/c/writer.c is prebuilt for this VM; asked: $*" >&2; exit 1 ;;
esac
[ -n "$out" ] || { echo "cc-shim: no -o" >&2; exit 1; }
cp "/opt/wedge/cc/writer-$kind" "$out"
