/* orch_member_priv.h — the layout of orch_member (orch_member.h), private to orchestrator/member/:
 * orch_member.c (load, place, device, the sync configuration, teardown, the accessors) and
 * orch_member_connect.c (WAN engine, rendezvous, intra communicators, peers, dial, comm engine). */
#ifndef ORCH_MEMBER_PRIV_H
#define ORCH_MEMBER_PRIV_H

#include "orchestrator/launch/orch_device.h"
#include "orchestrator/member/orch_member.h"

struct orch_member {
    orch_member_opts opts; /* the caller's (its strings stay the caller's) */
    orch_member_id id;
    xdc_topology *topo;
    orch_run_config cfg;
    orch_planned planned; /* with cfg.plan_auto: the plan the run follows */
    /* The device: the worker's choice, or the CPU for libxdc. */
    const xdc_kern_backend *be;
    orch_device device; /* the region's device (orch_device.h): be's kind */
    int cuda_device; /* CUDA ordinal among the visible devices (LOCAL_RANK mod the visible count); -1 on the CPU devices */
    xdc_intra_backend intra; /* NCCL on CUDA, the shared-memory backend otherwise */
    int rejoin, left;        /* orch_member_set_rejoin */
    /* Connections, and the sync engine (the one comm thread that runs every sync, in posting order). */
    xdc_wan_engine *wan;
    xdc_wan_listener *lis;
    xdc_wan_peer **peers; /* (n_regions) same lrank in every linked region; NULL elsewhere */
    int *route;           /* (n_regions * n_regions) xdc_topology_routes: the shards of unlinked regions come relayed */
    xdc_wan_peer *prev_peer, *next_peer; /* span: neighbouring stages across a region boundary */
    xdc_wan_peer *wrap_peer; /* span, pipeline_chunks: the first and the last stage (orch_member_span_wrap) */
    rdzv_client *rdzv;
    xdc_intra_comm *region_comm, *pp, *dp;
    xdc_sync_engine *sync_eng;
    xdc_codec_cfg codec_cfg; /* the WAN codec in use */
};

#endif /* ORCH_MEMBER_PRIV_H */
