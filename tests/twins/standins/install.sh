#!/bin/sh
# Installs the stand-ins into the twin image at build time. Each behaves like the real
# thing on a DGX Spark as far as the deploy can tell (same commands, same output formats).
set -eu
here=/opt/spark-twin/standins

# nvidia-smi: what the driver package ships on a Spark.
install -m 0755 "$here/nvidia-smi" /usr/bin/nvidia-smi
install -d /etc/spark-twin
install -m 0644 "$here/gpu.conf" /etc/spark-twin/gpu.conf

# NVIDIA driver packages as real (empty) .deb files, so dpkg/apt-mark act on them for real.
# 580 is installed (what DGX OS ships); 590 is kept for scenarios that need it.
mkdir -p /opt/spark-twin/debs
for spec in "nvidia-driver-580-open 580.95.05-0ubuntu1" "nvidia-driver-590-open 590.44.01-0ubuntu1"; do
  set -- $spec
  root=$(mktemp -d)
  mkdir -p "$root/DEBIAN"
  cat > "$root/DEBIAN/control" <<CONTROL
Package: $1
Version: $2
Architecture: all
Maintainer: Spark twin <twin@localhost>
Section: non-free/libs
Priority: optional
Description: NVIDIA driver metapackage (Spark twin stand-in, no files)
CONTROL
  dpkg-deb --build "$root" "/opt/spark-twin/debs/$1.deb" >/dev/null
  rm -rf "$root"
done
dpkg -i /opt/spark-twin/debs/nvidia-driver-580-open.deb >/dev/null

# The memory-capping override DGX OS ships (the deploy must remove it).
install -D -m 0644 "$here/zz-nvidia-drm-override.conf" /etc/modprobe.d/zz-nvidia-drm-override.conf

# The operator's login: a sudoer, as the first user of a Spark is.
useradd --create-home --shell /bin/bash --groups sudo spark
echo 'spark ALL=(ALL:ALL) NOPASSWD: ALL' > /etc/sudoers.d/90-spark-twin
chmod 0440 /etc/sudoers.d/90-spark-twin
visudo -cf /etc/sudoers.d/90-spark-twin >/dev/null

# The Hugging Face Hub: a stand-in server with small seed repositories (and one of about 24 MB,
# spark-twin/big-model), on 127.0.0.1:5555 (API) and :5556 (its CDN), started at boot. Its
# request log shows what was downloaded; a rate in bytes/s written to /etc/spark-twin/hub-rate
# throttles it from the next request on (absent or empty: full speed).
python3 "$here/hf-hub/seed.py" /opt/spark-twin/hub >/dev/null
cat > /etc/systemd/system/spark-twin-hub.service <<UNIT
[Unit]
Description=Stand-in Hugging Face Hub (Spark twin)
After=network.target

[Service]
ExecStart=/usr/bin/python3 $here/hf-hub/fake_hub.py --root /opt/spark-twin/hub --port 5555 --log /var/log/spark-twin-hub.log --rate-file /etc/spark-twin/hub-rate
Restart=on-failure

[Install]
WantedBy=multi-user.target
UNIT
systemctl enable spark-twin-hub.service >/dev/null 2>&1

# The RoCE GID tables of the ConnectX-7 ports, rebuilt on NetworkManager's events as the
# kernel rebuilds them on address changes (read through sysfs_root=/opt/spark-twin/sys).
install -d /opt/spark-twin/sys/class/infiniband
install -m 0755 "$here/roce-gids" /etc/NetworkManager/dispatcher.d/50-spark-twin-roce-gids

# Docker and the inference engines: no Docker engine runs in a twin, so `docker` is a stand-in
# CLI whose containers are processes of the twin (engine/docker), and an SGLang or vLLM command
# line runs the stand-in engine (engine/engine.py). Containers are recorded in
# /run/spark-twin-docker (tmpfs: gone at reboot, made again at boot or first use), writable by
# root and the docker group, as the daemon's socket is. The operator is not in that group.
chmod 0755 "$here/engine/docker" "$here/engine/engine.py" "$here/engine/ray.py"
ln -sf "$here/engine/docker" /usr/bin/docker
# `docker` imports docker_cli.py, and it engine.py: compiled here once, not at every call.
python3 -m compileall -q "$here/engine/docker_cli.py" "$here/engine/engine.py"
# The engine images' own programs, one folder each: an image's PATH has the folders of the
# programs images.json says it has (the docker stand-in's Image.path), so an image without Ray
# has no `ray`. The release an engine plays is its image's, parsed with that release's flag
# catalogue, which the harness copies to /opt/spark-twin/catalogues when a twin starts.
chmod 0755 "$here/engine/nvidia_entrypoint.sh"
for program in vllm sglang; do
  install -d "/opt/spark-twin/image/$program"
  printf '#!/bin/sh\nexec /usr/bin/python3 %s %s "$@"\n' "$here/engine/engine.py" "$program" \
    > "/opt/spark-twin/image/$program/$program"
done
install -d /opt/spark-twin/image/ray /opt/spark-twin/catalogues
printf '#!/bin/sh\nexec /usr/bin/python3 %s "$@"\n' "$here/engine/ray.py" > /opt/spark-twin/image/ray/ray
chmod 0755 /opt/spark-twin/image/*/*
groupadd --system docker
echo 'd /run/spark-twin-docker 2775 root docker -' > /usr/lib/tmpfiles.d/spark-twin-docker.conf

# The container registry ("the internet" for every registry host): a stand-in serving the images
# of images.json as real layers over HTTP on 127.0.0.1:5000, started at boot. Its blobs are made
# now (reproducible: the same digests at every build). Tests slow it down through
# /etc/spark-twin/registry-rate (bytes/s, read at each request), make an image missing through
# /etc/spark-twin/missing-images, and read what it sent in /var/log/spark-twin-registry.log.
python3 "$here/registry/registry.py" --cache /var/cache/spark-twin-registry --build
echo http://127.0.0.1:5000 > /etc/spark-twin/registry-url
cat > /etc/systemd/system/spark-twin-registry.service <<UNIT
[Unit]
Description=Stand-in container registry (Spark twin)
After=network.target

[Service]
ExecStart=/usr/bin/python3 $here/registry/registry.py --cache /var/cache/spark-twin-registry --port 5000 --log /var/log/spark-twin-registry.log --rate-file /etc/spark-twin/registry-rate --missing /etc/spark-twin/missing-images
Restart=on-failure

[Install]
WantedBy=multi-user.target
UNIT
systemctl enable spark-twin-registry.service >/dev/null 2>&1
# Docker's own files as a Spark has them: the image store of the docker stand-in (kept across
# reboots) and the daemon.json `nvidia-ctk runtime configure --runtime=docker` writes (NVIDIA
# Container Toolkit install guide, "Configuring Docker"), so `docker info` lists the nvidia
# runtime and `docker run --gpus all` works.
install -d -m 2775 -g docker /var/lib/spark-twin-docker /var/lib/spark-twin-docker/images
install -d /etc/docker
cat > /etc/docker/daemon.json <<'JSON'
{
    "runtimes": {
        "nvidia": {
            "args": [],
            "path": "nvidia-container-runtime"
        }
    }
}
JSON

# The RDMA devices of the ConnectX-7 (rocep1s0f0 and roceP2p1s0f0, the twin's two rails) as
# character devices under /dev/infiniband, as the kernel makes them on a Spark: uverbs0 and
# uverbs1 (major 231, minors from 192) and rdma_cm (misc, major 10). Nothing can open them
# here; they exist so `docker run --device=/dev/infiniband` finds them, as dockerd needs.
# /dev is a fresh tmpfs at every boot of a twin (and systemd-tmpfiles leaves /dev to udev,
# which a container has not), so a oneshot unit makes them early in each boot.
cat > /etc/systemd/system/spark-twin-rdma-devices.service <<'UNIT'
[Unit]
Description=Stand-in RDMA device nodes under /dev/infiniband (Spark twin)
DefaultDependencies=no
Before=sysinit.target

[Service]
Type=oneshot
RemainAfterExit=yes
ExecStart=/bin/sh -c 'install -d -m 0755 /dev/infiniband && for n in 0 1; do [ -e /dev/infiniband/uverbs$n ] || mknod -m 0666 /dev/infiniband/uverbs$n c 231 $((192 + n)); done && { [ -e /dev/infiniband/rdma_cm ] || mknod -m 0666 /dev/infiniband/rdma_cm c 10 58; }'

[Install]
WantedBy=sysinit.target
UNIT
systemctl enable spark-twin-rdma-devices.service >/dev/null 2>&1
