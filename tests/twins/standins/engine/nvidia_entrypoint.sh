#!/bin/bash
# Stand-in for /opt/nvidia/nvidia_entrypoint.sh, the ENTRYPOINT of NVIDIA's CUDA base images
# (and so of the NGC and SGLang images built on them). Its banner is left out; what matters
# is that it runs its arguments as a command: with none it starts bash, else `exec "$@"`.
# A first argument that is a flag (`--model ...`) is then an option of bash's exec builtin.
if [[ $# -eq 0 ]]; then
  exec /bin/bash
fi
exec "$@"
