"""The cluster topology (N GPU servers x G GPUs behind M fibre spans) and the question it
answers: how many servers a line feeds (advise --servers, the model's answer)."""

import math
from pathlib import Path

import pytest

from testbed import cli, topology
from testbed.errors import SpecError
from testbed.experiment.advise import advise as adv
from testbed.experiment.advise import servers
from testbed.experiment.plan import plan as plan_mod
from testbed.experiment.resolve import explain

ROOT = Path(__file__).resolve().parents[2]


def cluster(**params):
    return topology.build("cluster", {"distance_km": 3000, "rate": "100gbit", **params})


def test_each_fibre_is_its_own_span_from_the_storage_site():
    topo = cluster(servers=5, gpus=2, fibres=3)
    spans = topology.fibres(topo)
    assert list(spans) == ["f1", "f2", "f3"]
    assert [(a, b) for a, b, _ in spans.values()] == [("s0", "s1"), ("s0", "s2"), ("s0", "s3")]
    assert all(s.distance_km == 3000 and s.rate_mbit == 100_000 for _, _, s in spans.values())
    assert topology.storage_hosts(topo) == ["srv"]
    assert topology.access_link(topo, "srv")[1] == "s0"  # a plain link to its site's switch
    assert len(topology.worker_hosts(topo)) == 10


def test_servers_go_round_robin_over_the_fibres():
    topo = cluster(servers=5, gpus=2, fibres=3)
    for i in range(1, 6):
        for g in (1, 2):
            w = f"n{i}g{g}"
            assert topology.site_of(topo, w) == f"f{(i - 1) % 3 + 1}"
            assert [n for n, _ in topology.path_fibres(topo, w)] == [topology.site_of(topo, w)]
            assert topology.access_link(topo, w)[1] == f"s{(i - 1) % 3 + 1}"


@pytest.mark.parametrize("servers_n,gpus,fibres", [(2, 8, 1), (12, 10, 1), (12, 10, 5),
                                                   (3, 1, 2), (1, 16, 1)])
def test_each_server_is_one_gpu_host(servers_n, gpus, fibres):
    """host_sizes groups a site's workers in name order, host_gpus at a time: each
    server's G workers must be one host (n02g1 sorts before n10g1: the names are
    zero-padded), on any count of fibres."""
    topo = cluster(servers=servers_n, gpus=gpus, fibres=fibres)
    sizes = topology.host_sizes(topo, gpus)
    assert len(sizes) == servers_n * gpus and set(sizes.values()) == {gpus}
    site_order = {}
    for w in topology.worker_hosts(topo):
        site_order.setdefault(topology.site_of(topo, w), []).append(w)
    for workers in site_order.values():
        workers.sort(key=lambda w: (len(w), w))  # host_sizes' order
        for start in range(0, len(workers), gpus):
            assert len({w.split("g")[0] for w in workers[start:start + gpus]}) == 1


@pytest.mark.parametrize("params,match", [
    ({"gpus": 0}, "gpus"),
    ({"servers": 0}, "servers"),
    ({"fibres": 0}, "fibres"),
    ({"fibres": 65}, "fibres"),
    ({"servers": 200, "gpus": 8}, "at most 1024"),
    ({"servers": "two"}, "servers"),
    ({"gpu": 8}, "unknown parameter 'gpu'"),
])
def test_bad_cluster_input_is_one_error(params, match):
    with pytest.raises(SpecError, match=match):
        cluster(**params)


def test_bad_cluster_input_on_the_command_line_is_one_line(capsys):
    rc = cli.main(["topo", "show", "cluster", "-p", "gpus=0"])
    err = capsys.readouterr().err
    assert rc == 2 and "gpus" in err and "Traceback" not in err and len(err.splitlines()) == 1


def test_it_is_a_mininet_custom_file():
    """`mn --custom topologies/cluster.py --topo cluster,servers=2,...` builds it as
    Mininet's own parser hands it the parameters."""
    from mininet.util import buildTopo
    entry = topology.load_topologies()["cluster"]
    assert entry.path.name == "cluster.py"
    topo = buildTopo({"cluster": entry.cls}, "cluster,servers=2,gpus=2,fibres=2,distance_km=60")
    assert sorted(topo.hosts()) == ["n1g1", "n1g2", "n2g1", "n2g2", "srv"]
    assert sorted(topo.switches()) == ["s0", "s1", "s2"] and len(topo.links()) == 7


def test_the_experiment_builds_each_point_from_its_servers_and_host_gpus():
    plan = plan_mod.load(ROOT / "experiments" / "cluster.toml")
    assert sorted({(p.value("servers"), p.workers) for p in plan.points}) == [(1, 8), (2, 16)]
    for p in plan.points:
        topo = plan.resolver.topo(p)
        assert len(topology.worker_hosts(topo)) == p.workers
        assert set(topology.host_sizes(topo, p.host.gpus).values()) == {8}
    smaller = plan_mod.load(ROOT / "experiments" / "cluster.toml", {"host_gpus": "2"})
    assert sorted({p.workers for p in smaller.points}) == [2, 4]


def test_fixed_fibres_name_the_links_a_file_may_address(tmp_path):
    f = tmp_path / "c.toml"
    f.write_text('topology = "cluster"\n[fixed]\nfibres = 2\nservers = 3\nhost_gpus = 1\n'
                 '"fibre.f2.distance_km" = 60\n[sweep]\ndistance_km = [0, 3000]\n')
    plan = plan_mod.load(f)
    far = max(plan.points, key=lambda p: p.fibre("f1").distance_km)
    assert far.fibre("f1").distance_km == 3000 and far.fibre("f2").distance_km == 60
    topo = plan.resolver.topo(far)
    assert topology.site_of(topo, "n2g1") == "f2" and far.workers == 3
    with pytest.raises(SpecError, match="f2"):
        plan_mod.load(f, {"fibres": "1"})  # f2 is gone with one fibre


@pytest.mark.parametrize("text,match", [
    ('topology = "cluster"\n[sweep]\nfibres = [1, 2]\n', "one value per experiment"),
    ('topology = "cluster"\n[fixed]\nworkers = 4\n', "topology cluster has no such"),
    ('topology = "apn"\n[fixed]\nservers = 2\n', "topology apn has no such"),
    ('topology = "apn"\n[sweep]\nfibres = [1, 2]\n', "topology apn has no such"),
])
def test_topology_knobs_the_topology_does_not_take_are_refused(tmp_path, text, match):
    f = tmp_path / "c.toml"
    f.write_text(text)
    with pytest.raises(SpecError, match=match):
        plan_mod.load(f)


def scenario(**kw):
    return adv.Scenario(**{"workload": "resnet50-h100", "distance_km": 3000,
                           "topology": "cluster", **kw})


def load_in(tmp_path):
    def load(s):
        f = tmp_path / f"s{s.servers}.toml"
        f.write_text(adv.experiment_text(s))
        return plan_mod.load(f)
    return load


@pytest.mark.parametrize("fibres", [1, 2])
def test_a_line_feeds_as_many_servers_as_its_payload_covers(tmp_path, fibres):
    """resnet50 is compute-bound at 3,000 km once advise's settings are in (205 MB/s a
    GPU, 1.64 GB/s an 8-GPU server): the lines feed every count whose busiest span
    carries its servers' demand, and the first count past it is stopped by the fibre."""
    s = scenario(fibres=fibres)
    goal = adv.Goal("slowdown_pct", 1)
    rows = servers.ask(s, goal, tuple(range(1, 17)), adv.DEFAULT_ALLOWED, load_in(tmp_path))
    per_server = rows[0].demand_GB_s
    line = rows[0].lines_GB_s / fibres
    fed = max(n for n in range(1, 17) if math.ceil(n / fibres) * per_server <= line)
    assert servers.feeds(rows) == fed == (7 if fibres == 1 else 14)
    assert all(r.best.limited_by == "compute" for r in rows[:fed])
    past = rows[fed]
    assert not past.meets and past.best.limited_by == "fibre"
    assert all(dict(r.best.changes).get("data_path", "direct") == "direct" for r in rows)
    assert f"feeds up to {fed} server(s)" in servers.answer(rows, s, goal)


def test_the_rated_gpu_sits_on_the_busiest_fibre(tmp_path):
    """Three servers on two fibres: f1 carries two, f2 one; advise rates server 1's GPU,
    whose share of its span is the smaller."""
    plan = load_in(tmp_path)(scenario(servers=3, fibres=2, gpus=8))
    far = adv.far_point(plan)
    topo = plan.resolver.topo(far)
    rater = adv.Rater(plan, adv.Goal("slowdown_pct", 1))
    assert topology.site_of(topo, rater.worker) == "f1"
    assert explain.share_Bps(topo, far, rater.worker) == \
        min(explain.share_Bps(topo, far, w) for w in topology.worker_hosts(topo))


@pytest.mark.parametrize("text,counts", [("3", (3,)), ("1-4", (1, 2, 3, 4)),
                                         ("1,3, 2", (1, 2, 3)), ("2-3,8", (2, 3, 8))])
def test_server_counts(text, counts):
    assert servers.parse_counts(text) == counts


@pytest.mark.parametrize("text", ["", "0", "a", "4-2", "1-2000", "1-100", "-3", "1.5"])
def test_bad_server_counts(text):
    with pytest.raises(SpecError, match="--servers"):
        servers.parse_counts(text)


def test_the_command_answers_the_servers_question(capsys):
    rc = cli.main(["advise", "--workload", "resnet50-h100", "--distance-km", "3000",
                   "--slowdown-pct", "1", "--servers", "6-8", "--model-only"])
    text = capsys.readouterr().out
    assert rc == 0 and "feeds up to 7 server(s) of 8 GPUs" in text and "fibre" in text


@pytest.mark.parametrize("extra,match", [
    (["--servers", "1-2"], "--model-only"),
    (["--gpus", "4", "--model-only"], "--servers"),
    (["--servers", "1-2", "--workers", "2", "--model-only"], "--workers"),
    (["--servers", "1-2", "--gpus", "2000", "--model-only"], "gpus"),
])
def test_the_servers_question_refuses_bad_input_in_one_line(capsys, extra, match):
    rc = cli.main(["advise", "--workload", "resnet50-h100", "--distance-km", "3000",
                   "--slowdown-pct", "1", *extra])
    err = capsys.readouterr().err
    assert rc == 2 and match in err and "Traceback" not in err


def test_advise_reads_a_cluster_experiment_as_its_servers(capsys):
    """--experiment on a cluster file: its far point's servers, GPUs per server and
    fibres, at the distance of a worker's path (parallel spans do not add up)."""
    from testbed.experiment.advise import job
    plan = plan_mod.load(ROOT / "experiments" / "cluster.toml", {"fibres": "2"})
    far = job.far_point(plan)
    figures = job.far_figures(plan, far)
    assert figures["distance_km"] == 3000 and "workers" not in figures
    assert (figures["servers"], figures["gpus"], figures["fibres"]) == \
        (far.value("servers"), 8, 2)
    rc = cli.main(["advise", "--experiment", str(ROOT / "experiments" / "cluster.toml"),
                   "--slowdown-pct", "1", "--model-only"])
    assert rc == 0 and "meets the goal" in capsys.readouterr().out
