#!/bin/sh
# NVIDIA's Ray install step for the NGC vLLM 26.05 image, which ships without Ray
# (NVIDIA/dgx-spark-playbooks nvidia/vllm/README.md @ 0db7c141: run_cluster.sh patched so
# RAY_START_CMD is `pip install -q --root-user-action=ignore 'ray[default]>=2.9' && ray start`).
# As an engine.mods script it runs in the Ray head's and every worker's container before
# `ray start`.
set -e
pip install -q --root-user-action=ignore 'ray[default]>=2.9'
