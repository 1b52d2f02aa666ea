/*
 * speeds.h — planning figures for each kind of tier: read bandwidth and
 * the fixed cost of one read.  The store's cost model (kvt_lookup_worth)
 * starts from them until it has measured its own reads, and the capacity
 * planner (src/plan/cost.c) uses them as its catalog defaults, so the two
 * never disagree.  Round numbers for the hardware of docs/PLANNING.md:
 * host DRAM over PCIe, a local NVMe RAID, a provisioned parallel file
 * system, S3 from one node.
 */
#ifndef KVT_SPEEDS_H
#define KVT_SPEEDS_H

/* The device tier: HBM, read where the engine's blocks are. */
#define KVT_SPEED_DEVICE_GBPS 1000.0
#define KVT_SPEED_DEVICE_LAT_US 2.0
#define KVT_SPEED_DRAM_GBPS 25.0
#define KVT_SPEED_DRAM_LAT_US 5.0
#define KVT_SPEED_NVME_GBPS 6.0
#define KVT_SPEED_NVME_LAT_US 100.0
/* Another node's daemon: a 100 Gb/s NIC, one round trip per chunk. */
#define KVT_SPEED_PEER_GBPS 10.0
#define KVT_SPEED_PEER_LAT_US 50.0
#define KVT_SPEED_FS_GBPS 1.0
#define KVT_SPEED_FS_LAT_US 1000.0
#define KVT_SPEED_S3_GBPS 1.0
#define KVT_SPEED_S3_LAT_US 30000.0

#endif
