#!/usr/bin/env bash
# The SONIC papers' scenarios through `sonic plan --simulate` (issue 15); writes scenarios.txt beside this file.
# Inputs are the papers' per-event figures (ProtoDUNE) or our measured bytes per event (MiniAOD); see README.
set -euo pipefail
cd "$(dirname "$0")"
sonic=${SONIC:-sonic}
{
echo "## 1. ProtoDUNE: 110 s of other work, 1.6 s of T4 time per event, one T4-like server"
$sonic plan --other-ms-per-event 110000 --server-ms-per-event 1600 --simulate --jobs 34 60 68 75 90 136 \
    --events 20 --service-cv 0.2 --other-cv 0.1
echo; echo "## 2a. ProtoDUNE network cap: float32 patches, 4.1 Gb (512.5 MB) per event, 25 s per job event, 100 Gb/s"
$sonic plan --other-ms-per-event 25000 --server-ms-per-event 1600 --bytes-per-event 512.5e6 --sent-fraction 1 \
    --link-gbps 100 --link-utilisation 1.0 --simulate --servers 64 --jobs 300 500 600 700 900 --events 12 \
    --service-cv 0.2 --other-cv 0.1
echo; echo "## 2b. the same with uint8 patches (a quarter of the bytes)"
$sonic plan --other-ms-per-event 25000 --server-ms-per-event 1600 --bytes-per-event 128.1e6 --sent-fraction 1 \
    --link-gbps 100 --link-utilisation 1.0 --simulate --servers 160 --jobs 600 1200 2400 3000 --events 10 \
    --service-cv 0.2 --other-cv 0.1
echo; echo "## 3a. MiniAOD: 2,500 four-thread jobs (10,000 streams) on 100 servers at our CPU server's 10.3 ms/event"
$sonic plan --other-ms-per-event 667 --server-ms-per-event 10.3 --bytes-per-event 1.0e6 --sent-fraction 0.9997 \
    --requests-per-event 3 --link-gbps 400 --link-utilisation 1.0 --simulate --servers 100 --jobs 10000 --events 12 \
    --service-cv 0.3 --other-cv 0.3
echo; echo "## 3b. the same at 5 ms/event per server (a T4-like server; assumed, not measured)"
$sonic plan --other-ms-per-event 667 --server-ms-per-event 5 --bytes-per-event 1.0e6 --sent-fraction 0.9997 \
    --requests-per-event 3 --link-gbps 400 --link-utilisation 1.0 --simulate --servers 100 --jobs 10000 --events 12 \
    --service-cv 0.3 --other-cv 0.3
} > scenarios.txt
