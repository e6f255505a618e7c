"""``torch.Generator(device="tpu")`` as diffusers and torch.cuda users write it (torch raised its C++-hooks
error: "implement `getNewGenerator`"). Its streams are the device's own (as a CUDA generator's differ from
a CPU one's), so the checks are what a generator promises: the same seed gives the same numbers in every
eager mode, its draws leave the device's default RNG alone, its state round-trips, the numbers look like
their distribution."""
import copy

import pytest
import torch

import torch_tpu


def _draws(g):
    x = torch.empty(6, device="tpu")
    return [torch.randn(5, generator=g, device="tpu"), torch.rand(2, 3, generator=g, device="tpu"),
            torch.randint(0, 100, (4,), generator=g, device="tpu"), x.normal_(2.0, 0.5, generator=g),
            torch.bernoulli(torch.full((8,), 0.5, device="tpu"), generator=g),
            torch.multinomial(torch.ones(10, device="tpu"), 4, generator=g),
            torch.randperm(7, generator=g, device="tpu")]


def _host(ts):
    return [t.cpu() for t in ts]


def test_the_same_seed_gives_the_same_numbers_in_every_eager_mode():
    g = torch.Generator(device="tpu")
    assert isinstance(g, torch.Generator) and g.device == torch.device("tpu", 0)
    assert g.manual_seed(7) is g and g.initial_seed() == 7
    first = _host(_draws(g))
    with torch.tpu.set_eager_mode(torch_tpu.EagerMode.DEFER_AND_FUSE):
        again = _host(_draws(torch.Generator("tpu").manual_seed(7)))
    for a, b in zip(first, again):
        assert torch.equal(a, b)
    other = _host(_draws(torch.Generator(torch.device("tpu")).manual_seed(8)))
    assert not torch.equal(first[0], other[0])


def test_a_generator_leaves_the_default_rng_alone():
    torch.manual_seed(3)
    plain = [torch.randn(4, device="tpu").cpu() for _ in range(2)]
    torch.manual_seed(3)
    g = torch.Generator("tpu").manual_seed(3)
    mixed = []
    for _ in range(2):
        mixed.append(torch.randn(4, device="tpu").cpu())
        torch.randn(4, generator=g, device="tpu")
    assert all(torch.equal(a, b) for a, b in zip(plain, mixed))


def test_state_round_trips_and_copies():
    g = torch.Generator("tpu").manual_seed(11)
    torch.randn(3, generator=g, device="tpu")
    state = g.get_state()
    assert state.dtype == torch.uint8 and state.numel() == 16
    a = torch.randn(5, generator=g, device="tpu").cpu()
    g.set_state(state)
    assert torch.equal(torch.randn(5, generator=g, device="tpu").cpu(), a)
    g.set_state(state)
    for twin in (copy.deepcopy(g), g.clone_state()):
        assert torch.equal(torch.randn(5, generator=twin, device="tpu").cpu(), a)
    with pytest.raises(RuntimeError, match="16-byte"):
        g.set_state(torch.zeros(3))


def test_draws_follow_their_distributions():
    g = torch.Generator("tpu").manual_seed(0)
    n = torch.randn(20000, generator=g, device="tpu").cpu()
    u = torch.rand(20000, generator=g, device="tpu").cpu()
    assert abs(float(n.mean())) < 0.05 and abs(float(n.std()) - 1) < 0.05
    assert 0 <= float(u.min()) and float(u.max()) < 1 and abs(float(u.mean()) - 0.5) < 0.02


def test_diffusers_latents_from_a_tpu_generator():
    """diffusers' randn_tensor (every pipeline's latents) with ``torch.Generator(device).manual_seed(0)``."""
    from diffusers.utils.torch_utils import randn_tensor

    device = torch.device("tpu")
    a = randn_tensor((2, 4, 8, 8), generator=torch.Generator(device).manual_seed(0), device=device)
    b = randn_tensor((2, 4, 8, 8), generator=[torch.Generator(device).manual_seed(s) for s in (0, 1)], device=device)
    assert a.device.type == "tpu" and torch.equal(a[0].cpu(), b[0].cpu())
    assert not torch.equal(b[0].cpu(), b[1].cpu())


def test_other_generators_keep_torch_behaviour():
    cpu = torch.Generator()
    assert type(cpu) is torch.Generator and cpu.device.type == "cpu"
    with pytest.raises(RuntimeError, match="expected a 'tpu' device type for generator but found 'cpu'"):
        torch.randn(3, generator=cpu, device="tpu")
    with pytest.raises(TypeError, match="takes only the device"):
        torch.Generator("tpu", 3)
