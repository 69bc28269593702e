"""ferry.dcp on the installed torch 2.x: sharded DCP save and load
round trip in a one-process gloo group."""

import os
import socket

import pytest
import torch
import torch.distributed as dist

import ferry.dcp


@pytest.fixture
def gloo_group():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=1)
    yield
    dist.destroy_process_group()


def test_train_state_round_trip(gloo_group, tmp_path):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Embedding(50, 8), torch.nn.Linear(8, 50))
    ddp = torch.nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.AdamW(ddp.parameters(), lr=0.1)
    ddp(torch.arange(10)).sum().backward()
    opt.step()
    saved = {k: v.clone() for k, v in model.state_dict().items()}
    saved_opt = {k: {n: t.clone() for n, t in st.items()} for k, st in opt.state_dict()["state"].items()}
    path = tmp_path / "step-1"
    assert ferry.dcp.save_train_state(path, ddp, opt)
    assert (path / ".metadata").exists()
    assert any(n.endswith(".distcp") for n in os.listdir(path))

    torch.manual_seed(1)
    other = torch.nn.Sequential(torch.nn.Embedding(50, 8), torch.nn.Linear(8, 50))
    assert not torch.equal(other[0].weight, saved["0.weight"])
    other_ddp = torch.nn.parallel.DistributedDataParallel(other)
    other_opt = torch.optim.AdamW(other_ddp.parameters(), lr=0.1)
    assert ferry.dcp.load_train_state(path, other_ddp, other_opt)
    for k, v in other.state_dict().items():
        assert torch.equal(v, saved[k]), k
    got_opt = other_opt.state_dict()["state"]
    assert sorted(got_opt) == sorted(saved_opt)
    for k, st in saved_opt.items():
        for n, t in st.items():
            assert torch.equal(got_opt[k][n], t), (k, n)
