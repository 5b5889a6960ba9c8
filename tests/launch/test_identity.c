/* test_identity.c — orchestrator/orch_identity: each source (flags, XDC_*, torchrun, Open MPI, PMIx/PMI,
 * Slurm variables and hostlists, the topology), their precedence and the warning when a flag overrides
 * a different value, clear errors for missing, malformed and contradicting values, and the worker
 * environment contract read back through the resolver. Environments are arrays, never the process's. */
#include "tests/xdc_test.h"

#include "common/xdc_log.h"
#include "orchestrator/launch/orch_identity.h"

#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

static const char topo_yaml[] = "name: t\n"
                                "regions:\n"
                                "  - name: us-east\n"
                                "    nodes: gpu-e[01-04]\n"
                                "    gpus_per_node: 0\n"
                                "    workers_per_node: 2\n"
                                "    gpu: {model: cpu, bf16_tflops: 1, memory_gib: 4}\n"
                                "    intra: {bandwidth_gbps: 40, latency_us: 10}\n"
                                "  - name: eu-west\n"
                                "    nodes: gpu-w[1-2]\n"
                                "    gpus_per_node: 0\n"
                                "    workers_per_node: 3\n"
                                "    gpu: {model: cpu, bf16_tflops: 1, memory_gib: 4}\n"
                                "    intra: {bandwidth_gbps: 40, latency_us: 10}\n"
                                "links:\n"
                                "  - {from: us-east, to: eu-west, bandwidth_gbps: 1, rtt_ms: 40}\n";

static xdc_topology *load_topo(void)
{
    xdc_topology *t = NULL;
    XDC_ASSERT_OK(xdc_topology_parse(topo_yaml, strlen(topo_yaml), "t.yaml", &t, NULL));
    return t;
}

#define ENV(...)   ((const char *const[]){__VA_ARGS__, NULL})
#define SRC(id, f) ((id).source[ORCH_ID_##f])

XDC_TEST(identity_from_xdc_variables)
{
    orch_identity id;
    const char *const *env = ENV("XDC_RUN_ID=r1", "XDC_REGION=us-east", "XDC_NODE_RANK=03", "XDC_NUM_NODES=16",
                                 "XDC_COORDINATOR=10.0.0.1:29400", "SLURMD_NODENAME=gpu-e03", "PATH=/bin");
    XDC_ASSERT_OK(orch_identity_resolve(NULL, env, NULL, ORCH_ID_REQUIRE_AGENT, &id, NULL));
    XDC_ASSERT(strcmp(id.run_id, "r1") == 0 && strcmp(SRC(id, RUN_ID), "XDC_RUN_ID") == 0);
    XDC_ASSERT(strcmp(id.region, "us-east") == 0 && strcmp(SRC(id, REGION), "XDC_REGION") == 0);
    XDC_ASSERT_EQ(id.node, 3);
    XDC_ASSERT_EQ(id.num_nodes, 16);
    XDC_ASSERT(strcmp(id.host, "gpu-e03") == 0 && strcmp(SRC(id, HOST), "SLURMD_NODENAME") == 0);
    XDC_ASSERT(strcmp(id.coordinator, "10.0.0.1:29400") == 0);
    XDC_ASSERT_EQ(id.rank, -1); /* not given, not required */
    XDC_ASSERT(SRC(id, RANK)[0] == '\0');
    char line[512];
    orch_identity_describe(&id, line, sizeof line);
    XDC_ASSERT_STR_CONTAINS(line, "region=us-east (XDC_REGION) node=3/16 (XDC_NODE_RANK, XDC_NUM_NODES) host=gpu-e03 "
                                  "(SLURMD_NODENAME) run=r1 (XDC_RUN_ID) coordinator=10.0.0.1:29400 (XDC_COORDINATOR)");
}

XDC_TEST(identity_from_torchrun_variables)
{
    orch_identity id;
    /* torchrun: GROUP_RANK is the node; nodes = WORLD_SIZE / LOCAL_WORLD_SIZE. */
    XDC_ASSERT_OK(
        orch_identity_resolve(NULL,
                              ENV("GROUP_RANK=2", "RANK=5", "WORLD_SIZE=8", "LOCAL_RANK=1", "LOCAL_WORLD_SIZE=2",
                                  "MASTER_ADDR=10.1.1.1", "MASTER_PORT=29500", "TORCHELASTIC_RUN_ID=te1"),
                              NULL, 0, &id, NULL));
    XDC_ASSERT_EQ(id.node, 2);
    XDC_ASSERT(strcmp(SRC(id, NODE), "GROUP_RANK") == 0);
    XDC_ASSERT_EQ(id.num_nodes, 4);
    XDC_ASSERT(strcmp(SRC(id, NUM_NODES), "WORLD_SIZE/LOCAL_WORLD_SIZE") == 0);
    XDC_ASSERT_EQ(id.rank, 5);
    XDC_ASSERT_EQ(id.world_size, 8);
    XDC_ASSERT_EQ(id.local_rank, 1);
    XDC_ASSERT_EQ(id.local_world_size, 2);
    XDC_ASSERT(strcmp(id.master_addr, "10.1.1.1") == 0);
    XDC_ASSERT_EQ(id.master_port, 29500);
    XDC_ASSERT(strcmp(id.run_id, "te1") == 0 && strcmp(SRC(id, RUN_ID), "TORCHELASTIC_RUN_ID") == 0);
    /* Without GROUP_RANK the node comes from RANK / LOCAL_WORLD_SIZE. */
    XDC_ASSERT_OK(orch_identity_resolve(NULL, ENV("RANK=7", "WORLD_SIZE=8", "LOCAL_WORLD_SIZE=2"), NULL, 0, &id, NULL));
    XDC_ASSERT_EQ(id.node, 3);
    XDC_ASSERT(strcmp(SRC(id, NODE), "RANK/LOCAL_WORLD_SIZE") == 0);
    /* A world that is not whole nodes is an error naming both variables. */
    xdc_diag d = {{0}};
    XDC_ASSERT_ERR(orch_identity_resolve(NULL, ENV("WORLD_SIZE=7", "LOCAL_WORLD_SIZE=2"), NULL, 0, &id, &d),
                   XDC_ERR_CONFIG);
    XDC_ASSERT_STR_CONTAINS(d.msg, "WORLD_SIZE=7 is not a multiple of LOCAL_WORLD_SIZE=2");
    /* torchrun inside region eu-west (8 workers before it, 6 in it) with only XDC_REGION for the rest: the
     * global rank and size come from the topology, as a worker's (docs/api.md, "torchrun") */
    xdc_topology *t = load_topo();
    const char *const *tr = ENV("XDC_REGION=eu-west", "XDC_COORDINATOR=10.0.0.1:29400", "XDC_RUN_ID=r1", "GROUP_RANK=1",
                                "RANK=4", "WORLD_SIZE=6", "LOCAL_RANK=1", "LOCAL_WORLD_SIZE=3", "MASTER_ADDR=10.2.0.1",
                                "MASTER_PORT=29500");
    XDC_ASSERT_OK(orch_identity_resolve(NULL, tr, t, ORCH_ID_REQUIRE_WORKER, &id, NULL));
    XDC_ASSERT_EQ(id.global_rank, 12);
    XDC_ASSERT_EQ(id.global_world_size, 14);
    XDC_ASSERT(strcmp(SRC(id, GLOBAL_RANK), "topology") == 0 && strcmp(SRC(id, GLOBAL_WORLD_SIZE), "topology") == 0);
    /* the worker environment of that slot says the same */
    char **env = NULL;
    XDC_ASSERT_OK(orch_identity_worker_env(&id, t, 1, NULL, 29400, NULL, &env, NULL));
    bool found = false;
    for (char **e = env; *e; e++) found |= strcmp(*e, "XDC_GLOBAL_RANK=12") == 0;
    XDC_ASSERT(found);
    orch_identity_env_free(env);
    xdc_topology_destroy(t);
}

XDC_TEST(identity_from_open_mpi_and_pmi_variables)
{
    orch_identity id;
    XDC_ASSERT_OK(orch_identity_resolve(NULL,
                                        ENV("OMPI_COMM_WORLD_RANK=5", "OMPI_COMM_WORLD_SIZE=8",
                                            "OMPI_COMM_WORLD_LOCAL_RANK=1", "OMPI_COMM_WORLD_LOCAL_SIZE=2"),
                                        NULL, 0, &id, NULL));
    XDC_ASSERT_EQ(id.node, 2);
    XDC_ASSERT(strcmp(SRC(id, NODE), "OMPI_COMM_WORLD_RANK/OMPI_COMM_WORLD_LOCAL_SIZE") == 0);
    XDC_ASSERT_EQ(id.num_nodes, 4);
    XDC_ASSERT_EQ(id.rank, 5);
    XDC_ASSERT(strcmp(SRC(id, RANK), "OMPI_COMM_WORLD_RANK") == 0);
    XDC_ASSERT_EQ(id.local_rank, 1);
    XDC_ASSERT_EQ(id.local_world_size, 2);

    /* PMIx before PMI; PMI gives ranks only, so a node index is missing and the error lists the places
     * looked at. */
    xdc_diag d = {{0}};
    XDC_ASSERT_ERR(orch_identity_resolve(NULL, ENV("PMI_RANK=3", "PMIX_RANK=4", "PMI_SIZE=6"), NULL,
                                         ORCH_ID_BIT(ORCH_ID_RANK) | ORCH_ID_BIT(ORCH_ID_NODE), &id, &d),
                   XDC_ERR_CONFIG);
    XDC_ASSERT_STR_CONTAINS(d.msg, "no node (looked at --node, XDC_NODE_RANK, GROUP_RANK, NODE_RANK, "
                                   "RANK/LOCAL_WORLD_SIZE");
    XDC_ASSERT_STR_CONTAINS(d.msg, "SLURM_NODEID, SLURM_JOB_NODELIST, topology)");
    XDC_ASSERT_OK(orch_identity_resolve(NULL, ENV("PMI_RANK=3", "PMIX_RANK=4", "PMI_SIZE=6"), NULL,
                                        ORCH_ID_BIT(ORCH_ID_RANK), &id, NULL));
    XDC_ASSERT_EQ(id.rank, 4);
    XDC_ASSERT(strcmp(SRC(id, RANK), "PMIX_RANK") == 0);
    XDC_ASSERT_EQ(id.world_size, 6);
    XDC_ASSERT(strcmp(SRC(id, WORLD_SIZE), "PMI_SIZE") == 0);
}

XDC_TEST(identity_from_slurm_variables_and_hostlist)
{
    orch_identity id;
    XDC_ASSERT_OK(
        orch_identity_resolve(NULL,
                              ENV("SLURM_NODEID=1", "SLURM_NNODES=4", "SLURM_PROCID=9", "SLURM_NTASKS=16",
                                  "SLURM_LOCALID=1", "SLURMD_NODENAME=gpu-e02", "SLURM_JOB_NODELIST=gpu-e[01-04]"),
                              NULL, 0, &id, NULL));
    XDC_ASSERT_EQ(id.node, 1);
    XDC_ASSERT(strcmp(SRC(id, NODE), "SLURM_NODEID") == 0);
    XDC_ASSERT_EQ(id.num_nodes, 4);
    XDC_ASSERT(strcmp(SRC(id, NUM_NODES), "SLURM_NNODES") == 0);
    XDC_ASSERT_EQ(id.rank, 9);
    XDC_ASSERT_EQ(id.world_size, 16);
    XDC_ASSERT_EQ(id.local_rank, 1);
    /* Only the node list: this host's position in it, and its length. A fully qualified host name
     * matches the short names Slurm lists. */
    const orch_identity_flags fl = {.value = {[ORCH_ID_HOST] = "gpu-e03.dc1.example"}};
    XDC_ASSERT_OK(orch_identity_resolve(&fl, ENV("SLURM_JOB_NODELIST=gpu-e[01-04],gpu-w[1-2]"), NULL, 0, &id, NULL));
    XDC_ASSERT_EQ(id.node, 2);
    XDC_ASSERT(strcmp(SRC(id, NODE), "SLURM_JOB_NODELIST") == 0);
    XDC_ASSERT_EQ(id.num_nodes, 6);
    XDC_ASSERT(strcmp(SRC(id, HOST), "--host") == 0);
    /* A malformed hostlist is named. */
    xdc_diag d = {{0}};
    XDC_ASSERT_ERR(orch_identity_resolve(&fl, ENV("SLURM_JOB_NODELIST=gpu-[03-01"), NULL, 0, &id, &d), XDC_ERR_CONFIG);
    XDC_ASSERT_STR_CONTAINS(d.msg, "SLURM_JOB_NODELIST='gpu-[03-01'");
}

XDC_TEST(identity_from_topology_host_position)
{
    xdc_topology *t = load_topo();
    orch_identity id;
    const orch_identity_flags fl = {
        .value = {[ORCH_ID_HOST] = "gpu-w2", [ORCH_ID_RUN_ID] = "r9", [ORCH_ID_COORDINATOR] = "coord:1"}};
    XDC_ASSERT_OK(orch_identity_resolve(&fl, ENV("HOME=/root"), t, ORCH_ID_REQUIRE_AGENT, &id, NULL));
    XDC_ASSERT(strcmp(id.region, "eu-west") == 0 && strcmp(SRC(id, REGION), "topology") == 0);
    XDC_ASSERT_EQ(id.region_index, 1);
    XDC_ASSERT_EQ(id.num_regions, 2);
    XDC_ASSERT_EQ(id.node, 1);
    XDC_ASSERT_EQ(id.num_nodes, 2);
    XDC_ASSERT(strcmp(SRC(id, NODE), "topology") == 0);
    /* With no --host the machine's own name is used. */
    char me[256] = "";
    XDC_ASSERT_EQ(gethostname(me, sizeof me - 1), 0);
    XDC_ASSERT_OK(orch_identity_resolve(NULL, ENV("X=1"), NULL, ORCH_ID_BIT(ORCH_ID_HOST), &id, NULL));
    XDC_ASSERT(strcmp(id.host, me) == 0 && strcmp(SRC(id, HOST), "gethostname()") == 0);
    xdc_topology_destroy(t);
}

XDC_TEST(identity_precedence_flags_then_xdc_then_launchers)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *mem = open_memstream(&buf, &len);
    xdc_log_set_stream(mem);
    xdc_log_set_level(XDC_LOG_INFO);
    orch_identity id;
    const orch_identity_flags fl = {.value = {[ORCH_ID_REGION] = "eu-west", [ORCH_ID_NODE] = "1"}};
    XDC_ASSERT_OK(orch_identity_resolve(&fl,
                                        ENV("XDC_REGION=us-east", "XDC_NODE_RANK=1", "XDC_NUM_NODES=2",
                                            "SLURM_NODEID=0", "SLURM_NNODES=5", "GROUP_RANK=1"),
                                        NULL, 0, &id, NULL));
    fflush(mem);
    XDC_ASSERT(strcmp(id.region, "eu-west") == 0 && strcmp(SRC(id, REGION), "--region") == 0);
    XDC_ASSERT_EQ(id.node, 1);
    XDC_ASSERT(strcmp(SRC(id, NODE), "--node") == 0);
    XDC_ASSERT_EQ(id.num_nodes, 2); /* XDC_* before Slurm */
    XDC_ASSERT(strcmp(SRC(id, NUM_NODES), "XDC_NUM_NODES") == 0);
    XDC_ASSERT_STR_CONTAINS(buf, "identity: region: --region=eu-west overrides XDC_REGION=us-east");
    XDC_ASSERT_STR_CONTAINS(buf, "identity: node: --node=1 overrides SLURM_NODEID=0");
    XDC_ASSERT_STR_CONTAINS(buf, "identity: num_nodes: XDC_NUM_NODES=2 overrides SLURM_NNODES=5");
    XDC_ASSERT(strstr(buf, "XDC_NODE_RANK=1") == NULL); /* agreeing values are not reported */
    /* A host name given explicitly does not contradict the machine's own name. */
    const orch_identity_flags hf = {.value = {[ORCH_ID_HOST] = "east-node1"}};
    XDC_ASSERT_OK(orch_identity_resolve(&hf, ENV("X=1"), NULL, 0, &id, NULL));
    fflush(mem);
    XDC_ASSERT(strstr(buf, "gethostname()") == NULL);
    /* torchrun before Open MPI before Slurm for the same field */
    XDC_ASSERT_OK(orch_identity_resolve(
        NULL, ENV("SLURM_NODEID=3", "OMPI_COMM_WORLD_RANK=2", "OMPI_COMM_WORLD_LOCAL_SIZE=1", "NODE_RANK=1"), NULL, 0,
        &id, NULL));
    XDC_ASSERT(strcmp(SRC(id, NODE), "NODE_RANK") == 0);
    XDC_ASSERT_OK(orch_identity_resolve(
        NULL, ENV("SLURM_NODEID=3", "OMPI_COMM_WORLD_RANK=2", "OMPI_COMM_WORLD_LOCAL_SIZE=1"), NULL, 0, &id, NULL));
    XDC_ASSERT(strcmp(SRC(id, NODE), "OMPI_COMM_WORLD_RANK/OMPI_COMM_WORLD_LOCAL_SIZE") == 0);
    XDC_ASSERT_EQ(id.node, 2);
    xdc_log_set_stream(NULL);
    fclose(mem);
    free(buf);
}

XDC_TEST(identity_errors_name_the_source)
{
    xdc_topology *t = load_topo();
    orch_identity id;
    xdc_diag d = {{0}};
    XDC_ASSERT_ERR(orch_identity_resolve(NULL, ENV("SLURMD_NODENAME=h"), NULL, ORCH_ID_REQUIRE_AGENT, &id, &d),
                   XDC_ERR_CONFIG);
    XDC_ASSERT_STR_CONTAINS(d.msg, "no run_id (looked at --run-id, XDC_RUN_ID, TORCHELASTIC_RUN_ID)");
    XDC_ASSERT_STR_CONTAINS(d.msg, "no region (looked at --region, XDC_REGION, topology)");

    XDC_ASSERT_ERR(orch_identity_resolve(NULL, ENV("SLURM_NODEID=two"), NULL, 0, &id, &d), XDC_ERR_CONFIG);
    XDC_ASSERT_STR_CONTAINS(d.msg, "node: SLURM_NODEID='two' is not a non-negative integer");
    const orch_identity_flags bad = {.value = {[ORCH_ID_NODE] = "-1"}};
    XDC_ASSERT_ERR(orch_identity_resolve(&bad, ENV("X=1"), NULL, 0, &id, &d), XDC_ERR_CONFIG);
    XDC_ASSERT_STR_CONTAINS(d.msg, "--node='-1'");
    /* A bad value below the winner is only ignored. */
    XDC_ASSERT_OK(orch_identity_resolve(NULL, ENV("XDC_NODE_RANK=1", "SLURM_NODEID=two"), NULL, 0, &id, &d));

    XDC_ASSERT_ERR(orch_identity_resolve(NULL, ENV("SLURM_NODEID=4", "SLURM_NNODES=4"), NULL, 0, &id, &d),
                   XDC_ERR_CONFIG);
    XDC_ASSERT_STR_CONTAINS(d.msg, "node=4 (from SLURM_NODEID) is not below num_nodes=4 (from SLURM_NNODES)");
    XDC_ASSERT_ERR(orch_identity_resolve(NULL, ENV("XDC_REGION=ap-south"), t, 0, &id, &d), XDC_ERR_CONFIG);
    XDC_ASSERT_STR_CONTAINS(d.msg, "region 'ap-south' (from XDC_REGION) is not a region of topology t.yaml");
    XDC_ASSERT_ERR(orch_identity_resolve(NULL, ENV("XDC_REGION=us-east", "SLURM_NNODES=8"), t, 0, &id, &d),
                   XDC_ERR_CONFIG);
    XDC_ASSERT_STR_CONTAINS(d.msg, "num_nodes=8 (from SLURM_NNODES) but topology t.yaml has 4 nodes in that region");
    XDC_ASSERT_ERR(orch_identity_resolve(NULL, ENV("XDC_REGION=us-east", "XDC_REGION_INDEX=1"), t, 0, &id, &d),
                   XDC_ERR_CONFIG);
    XDC_ASSERT_STR_CONTAINS(d.msg, "region_index=1 (from XDC_REGION_INDEX)");
    XDC_ASSERT_ERR(orch_identity_resolve(NULL, ENV("MASTER_PORT=70000"), NULL, 0, &id, &d), XDC_ERR_CONFIG);
    XDC_ASSERT_ERR(orch_identity_resolve(NULL, ENV("XDC_REGION="), NULL, 0, &id, &d), XDC_ERR_CONFIG);
    XDC_ASSERT_STR_CONTAINS(d.msg, "XDC_REGION='' is empty");
    xdc_topology_destroy(t);
}

static const char *env_value(char **env, const char *key)
{
    size_t k = strlen(key);
    for (char **e = env; *e; e++)
        if (strncmp(*e, key, k) == 0 && (*e)[k] == '=') return *e + k + 1;
    return NULL;
}

XDC_TEST(identity_worker_env_contract_round_trips)
{
    xdc_topology *t = load_topo();
    const orch_identity_flags fl = {
        .value = {[ORCH_ID_HOST] = "gpu-w2", [ORCH_ID_RUN_ID] = "run7", [ORCH_ID_COORDINATOR] = "10.0.0.1:29400"}};
    orch_identity node, w;
    XDC_ASSERT_OK(orch_identity_resolve(&fl, ENV("HOME=/home/x"), t, ORCH_ID_REQUIRE_AGENT, &node, NULL));
    char **env = NULL;
    /* The parent's own RANK and XDC_REGION must not leak through. */
    XDC_ASSERT_OK(orch_identity_worker_env(
        &node, t, 2, NULL, 29500, ENV("HOME=/home/x", "RANK=99", "XDC_REGION=us-east", "PATH=/bin"), &env, NULL));
    XDC_ASSERT(strcmp(env_value(env, "RANK"), "5") == 0); /* node 1 x 3 workers + slot 2 */
    XDC_ASSERT(strcmp(env_value(env, "WORLD_SIZE"), "6") == 0);
    XDC_ASSERT(strcmp(env_value(env, "LOCAL_RANK"), "2") == 0);
    XDC_ASSERT(strcmp(env_value(env, "LOCAL_WORLD_SIZE"), "3") == 0);
    XDC_ASSERT(strcmp(env_value(env, "MASTER_ADDR"), "gpu-w1") == 0);
    XDC_ASSERT(strcmp(env_value(env, "MASTER_PORT"), "29500") == 0);
    XDC_ASSERT(strcmp(env_value(env, "XDC_RUN_ID"), "run7") == 0);
    XDC_ASSERT(strcmp(env_value(env, "XDC_REGION"), "eu-west") == 0);
    XDC_ASSERT(strcmp(env_value(env, "XDC_REGION_INDEX"), "1") == 0);
    XDC_ASSERT(strcmp(env_value(env, "XDC_NUM_REGIONS"), "2") == 0);
    XDC_ASSERT(strcmp(env_value(env, "XDC_GLOBAL_RANK"), "13") == 0); /* us-east has 4 x 2 = 8 workers */
    XDC_ASSERT(strcmp(env_value(env, "XDC_GLOBAL_WORLD_SIZE"), "14") == 0);
    XDC_ASSERT(strcmp(env_value(env, "XDC_COORDINATOR"), "10.0.0.1:29400") == 0);
    XDC_ASSERT(strcmp(env_value(env, "PATH"), "/bin") == 0);
    int n_rank = 0;
    for (char **e = env; *e; e++) n_rank += strncmp(*e, "RANK=", 5) == 0;
    XDC_ASSERT_EQ(n_rank, 1);

    XDC_ASSERT(strcmp(env_value(env, "XDC_HOST"), "gpu-w2") == 0);

    /* The worker reads the same identity back, its node's host name included. */
    XDC_ASSERT_OK(orch_identity_resolve(NULL, (const char *const *)env, t, ORCH_ID_REQUIRE_WORKER, &w, NULL));
    XDC_ASSERT(strcmp(w.host, "gpu-w2") == 0 && strcmp(SRC(w, HOST), "XDC_HOST") == 0);
    XDC_ASSERT(strcmp(w.region, node.region) == 0 && strcmp(w.run_id, "run7") == 0);
    XDC_ASSERT_EQ(w.node, node.node);
    XDC_ASSERT_EQ(w.num_nodes, 2);
    XDC_ASSERT_EQ(w.rank, 5);
    XDC_ASSERT_EQ(w.local_rank, 2);
    XDC_ASSERT_EQ(w.global_rank, 13);
    XDC_ASSERT_EQ(w.global_world_size, 14);
    XDC_ASSERT_EQ(w.master_port, 29500);
    XDC_ASSERT(strcmp(SRC(w, NODE), "XDC_NODE_RANK") == 0);
    orch_identity_env_free(env);
    orch_identity_env_free(NULL);

    xdc_diag d = {{0}};
    XDC_ASSERT_ERR(orch_identity_worker_env(&node, t, 3, NULL, 29500, NULL, &env, &d), XDC_ERR_CONFIG);
    XDC_ASSERT_STR_CONTAINS(d.msg, "slot 3 outside region eu-west (2 nodes x 3 workers)");
    XDC_ASSERT_ERR(orch_identity_worker_env(&node, t, 0, NULL, 0, NULL, &env, &d), XDC_ERR_INVALID);
    xdc_topology_destroy(t);
}
