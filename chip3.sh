for m in compiled fused; do
  timeout 280 python3 bench/profile_device_ops.py --mode $m --top 150 --out $OUT 2>&1 | grep -v "^\s*$" | tail -3
done
