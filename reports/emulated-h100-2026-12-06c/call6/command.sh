export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
timeout 400 python3 -m domino_prof.cli tune --model llama3-3b --tp 8 --seq 4096 --mbs 2 --comm emulate --schedule domino-sp --high-priority-comm --grid comm_engine=sm,ce --grid sm_carveout=default,12 --grid cuda_graphs=on --no-analyze --out /tmp/tune 2>&1 | tail -40
cd /tmp/tune && tar -czf $OUT/tune.tar.gz tune.json */run.json */config.json
