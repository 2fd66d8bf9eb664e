set -u
mkdir -p /root/d && tar xzf .dataz/data.tgz -C /root/d
export NUMBA_CACHE_DIR=/root/numbacache KNNGRAPH_CACHE_DIR=/root/kcache KNNGRAPH_DEVICE_DATA=/root/d/.data
nvidia-smi --query-gpu=name --format=csv,noheader
time bash scripts/gpu_check.sh tests-parallel
ls $OUT
time timeout 200 bash scripts/gpu_check.sh sanitize
