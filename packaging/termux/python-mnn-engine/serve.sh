#!@TERMUX_PREFIX@/bin/sh
# Runs `python -m mnn_engine serve` for termux-services (sv up mnn-engine).
# Settings: @TERMUX_PREFIX@/etc/mnn-engine/serve.env
set -e
: "${HOME:=@TERMUX_HOME@}"
: "${TMPDIR:=@TERMUX_PREFIX@/tmp}"
export HOME TMPDIR
ENV_FILE=@TERMUX_PREFIX@/etc/mnn-engine/serve.env
if [ -f "$ENV_FILE" ]; then
	# shellcheck source=/dev/null
	. "$ENV_FILE"
fi
set -- serve
if [ -n "${MNN_ENGINE_MODEL:-}" ]; then
	set -- "$@" "$MNN_ENGINE_MODEL"
fi
set -- "$@" --host "${MNN_ENGINE_HOST:-127.0.0.1}" --port "${MNN_ENGINE_PORT:-8081}" \
	--backend "${MNN_ENGINE_BACKEND:-cpu}" --precision "${MNN_ENGINE_PRECISION:-low}"
if [ -n "${MNN_ENGINE_THREADS:-}" ]; then
	set -- "$@" --threads "$MNN_ENGINE_THREADS"
fi
if [ "${MNN_ENGINE_MMAP:-1}" = 0 ]; then
	set -- "$@" --no-mmap
fi
if [ -n "${MNN_ENGINE_API_KEY:-}" ]; then
	export MNN_ENGINE_API_KEY
fi
if [ -n "${MNN_ENGINE_HOME:-}" ]; then
	export MNN_ENGINE_HOME
fi
if [ -n "${MNN_ENGINE_GPU_LIBRARY_PATH:-}" ]; then
	LD_LIBRARY_PATH=$MNN_ENGINE_GPU_LIBRARY_PATH${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
	export LD_LIBRARY_PATH
fi
exec @TERMUX_PREFIX@/bin/python -m mnn_engine "$@"
