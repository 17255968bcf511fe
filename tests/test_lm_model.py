"""The GPT: padding invariance, KV-cached generation, sampling, checkpoints, input checks."""

import pytest
import torch

from workbook.lm import GPT, CharTokenizer, GPTConfig, KVCache, load_checkpoint, pad_batch, sample_texts, save_checkpoint

TOK = CharTokenizer()
CFG = GPTConfig(vocab_size=TOK.vocab_size, block_size=48, n_layer=2, n_head=2, d_model=32)


@pytest.fixture(scope="module")
def model():
    torch.manual_seed(0)
    m = GPT(CFG).eval()
    # Random init is close to uniform; larger weights make the test sharper.
    with torch.no_grad():
        for p in m.parameters():
            p.add_(0.3 * torch.randn_like(p))
    return m


def _random_seqs(n, g, lo=1, hi=20):
    lengths = torch.randint(lo, hi, (n,), generator=g).tolist()
    return [torch.randint(3, CFG.vocab_size, (L,), generator=g) for L in lengths]


def test_config_checks_its_fields():
    with pytest.raises(ValueError, match="divide"):
        GPTConfig(d_model=30, n_head=4)
    with pytest.raises(ValueError, match="dropout"):
        GPTConfig(dropout=1.0)


def test_shapes_hidden_and_tied_embeddings(model):
    ids = torch.randint(0, CFG.vocab_size, (3, 7))
    logits, hidden = model(ids, return_hidden=True)
    assert logits.shape == (3, 7, CFG.vocab_size) and hidden.shape == (3, 7, CFG.d_model)
    assert torch.allclose(logits, hidden @ model.wte.weight.T, atol=1e-5)
    assert torch.equal(model(ids), logits)
    assert model.num_params() == sum(p.numel() for p in model.parameters())
    assert model.config is CFG


@pytest.mark.parametrize("side", ["left", "right"])
def test_real_tokens_do_not_see_padding_or_batch_mates(model, side):
    """The invariant the whole of Part 3 relies on."""
    g = torch.Generator().manual_seed(1)
    seqs = _random_seqs(5, g)
    alone = [model(s[None], return_hidden=True) for s in seqs]
    for batch_size in (1, 2, 5):
        for extra in (0, 3):  # pad beyond the longest row too
            batch = seqs[:batch_size] + [torch.tensor([3] * (max(map(len, seqs)) + extra))]  # + a longer row
            ids, mask = pad_batch(batch, side=side, pad_id=TOK.pad_id)
            logits, hidden = model(ids, mask, return_hidden=True)
            assert torch.isfinite(logits).all()
            for i in range(batch_size):
                real = mask[i].bool()
                assert torch.allclose(logits[i, real], alone[i][0][0], atol=1e-5)
                assert torch.allclose(hidden[i, real], alone[i][1][0], atol=1e-5)


def test_padding_on_both_sides_and_in_the_middle(model):
    """PPO batches are [left-padded query | right-padded response]; any mask pattern works."""
    g = torch.Generator().manual_seed(2)
    query, response = _random_seqs(2, g, 2, 10)
    ref = model(torch.cat([query, response])[None])[0]
    ids = torch.cat([torch.zeros(3, dtype=torch.long), query, torch.zeros(2, dtype=torch.long), response,
                     torch.zeros(4, dtype=torch.long)])[None]
    mask = (torch.arange(ids.shape[1]) >= 3) & ~((torch.arange(ids.shape[1]) >= 3 + len(query))
                                                 & (torch.arange(ids.shape[1]) < 5 + len(query)))
    mask &= torch.arange(ids.shape[1]) < ids.shape[1] - 4
    out = model(ids, mask[None])[0]
    assert torch.allclose(out[mask], ref, atol=1e-5)


def test_int_and_bool_masks_agree_and_all_padding_row_is_finite(model):
    ids, mask = pad_batch([[5, 6, 7], [8]], side="left", pad_id=0)
    assert torch.equal(model(ids, mask), model(ids, mask.bool()))
    out = model(ids, torch.zeros_like(mask))
    assert torch.isfinite(out).all()


def test_bad_input_gives_one_clear_error(model):
    ids = torch.randint(0, CFG.vocab_size, (2, 5))
    with pytest.raises(ValueError, match="2-D"):
        model(ids[0])
    with pytest.raises(ValueError, match="integer"):
        model(ids.float())
    with pytest.raises(ValueError, match=r"\[0, 38\)"):
        model(ids + CFG.vocab_size)
    with pytest.raises(ValueError, match="shape of input_ids"):
        model(ids, torch.ones(2, 4, dtype=torch.long))
    with pytest.raises(ValueError, match="only 0 and 1"):
        model(ids, torch.full((2, 5), 2))
    with pytest.raises(ValueError, match="bool or integer"):
        model(ids, torch.ones(2, 5))
    with pytest.raises(ValueError, match="block_size"):
        model(torch.ones(1, CFG.block_size + 1, dtype=torch.long))
    # Left padding beyond block_size is fine: only real tokens take positions.
    long_ids = torch.ones(1, CFG.block_size + 5, dtype=torch.long)
    long_mask = torch.ones_like(long_ids)
    long_mask[:, :5] = 0
    assert torch.isfinite(model(long_ids, long_mask)).all()


def _queries(g, n=4):
    return pad_batch([torch.cat([torch.tensor([TOK.bos_id]), s]) for s in _random_seqs(n, g, 1, 8)],
                     side="left", pad_id=TOK.pad_id)


def test_kv_cached_generation_matches_full_forward(model):
    g = torch.Generator().manual_seed(3)
    ids, mask = _queries(g)
    responses, logits = model.generate(ids, mask, max_new_tokens=20, eos_id=TOK.eos_id, pad_id=TOK.pad_id,
                                       generator=torch.Generator().manual_seed(0), return_logits=True)
    for i, (resp, lg) in enumerate(zip(responses, logits)):
        query = ids[i, mask[i].bool()]
        full = model(torch.cat([query, resp[:-1]])[None])[0, len(query) - 1 :]
        assert lg.shape == (len(resp), CFG.vocab_size)
        assert torch.allclose(full, lg, atol=1e-5)


def test_kv_cache_forward_step_by_step(model):
    g = torch.Generator().manual_seed(4)
    ids, mask = _queries(g, 3)
    nxt = torch.randint(3, CFG.vocab_size, (3, 4), generator=g)
    full = model(torch.cat([ids, nxt], 1), torch.cat([mask, torch.ones_like(nxt)], 1))
    cache = KVCache()
    steps = [model(ids, mask, kv_cache=cache)]
    for t in range(4):
        steps.append(model(nxt[:, t : t + 1], torch.ones(3, 1, dtype=torch.long), kv_cache=cache))
    assert len(cache) == ids.shape[1] + 4
    assert torch.allclose(torch.cat(steps, 1), full, atol=1e-5)


def test_seeded_sampling_is_reproducible(model):
    ids, mask = _queries(torch.Generator().manual_seed(5))
    kw = dict(max_new_tokens=15, eos_id=TOK.eos_id, pad_id=TOK.pad_id, temperature=1.0, top_k=10)
    a = model.generate(ids, mask, generator=torch.Generator().manual_seed(7), **kw)
    b = model.generate(ids, mask, generator=torch.Generator().manual_seed(7), **kw)
    c = model.generate(ids, mask, generator=torch.Generator().manual_seed(8), **kw)
    assert all(torch.equal(x, y) for x, y in zip(a, b))
    assert not all(len(x) == len(y) and torch.equal(x, y) for x, y in zip(a, c))
    greedy = model.generate(ids, mask, max_new_tokens=15, eos_id=TOK.eos_id, pad_id=TOK.pad_id, temperature=0)
    assert all(r.dtype == torch.long and r.dim() == 1 for r in greedy)
    assert sample_texts(model, TOK, ["the", "a b"], max_new_tokens=10, seed=3) == \
        sample_texts(model, TOK, ["the", "a b"], max_new_tokens=10, seed=3)


def _eos_heavy_model(eos_logit_boost):
    torch.manual_seed(0)
    m = GPT(CFG).eval()
    with torch.no_grad():
        m.ln_f.weight.mul_(0.1)
        m.ln_f.bias.copy_(eos_logit_boost * m.wte.weight[TOK.eos_id] / m.wte.weight[TOK.eos_id].norm() ** 2)
    return m


def test_eos_ends_a_response_and_is_kept():
    ids, mask = _queries(torch.Generator().manual_seed(6), 8)
    always = _eos_heavy_model(50.0).generate(ids, mask, max_new_tokens=10, eos_id=TOK.eos_id, pad_id=TOK.pad_id)
    assert all(r.tolist() == [TOK.eos_id] for r in always)

    m = _eos_heavy_model(3.0)  # EOS likely but not certain: rows end at different steps
    responses = m.generate(ids, mask, max_new_tokens=12, eos_id=TOK.eos_id, pad_id=TOK.pad_id,
                           generator=torch.Generator().manual_seed(0))
    assert len({len(r) for r in responses}) > 1
    for r in responses:
        eos_at = (r == TOK.eos_id).nonzero().flatten().tolist()
        assert eos_at in ([], [len(r) - 1])
        assert len(r) == 12 or eos_at == [len(r) - 1]
        assert TOK.pad_id not in r.tolist()


def test_generate_checks_its_arguments(model):
    ids, mask = pad_batch([[1, 5, 6], [1, 7]], side="right", pad_id=0)
    kw = dict(eos_id=TOK.eos_id, pad_id=TOK.pad_id)
    with pytest.raises(ValueError, match="LEFT-padded"):
        model.generate(ids, mask, max_new_tokens=5, **kw)
    ids, mask = pad_batch([[1, 5, 6], [1, 7]], side="left", pad_id=0)
    with pytest.raises(ValueError, match="block_size"):
        model.generate(ids, mask, max_new_tokens=CFG.block_size, **kw)
    with pytest.raises(ValueError, match="max_new_tokens"):
        model.generate(ids, mask, max_new_tokens=0, **kw)
    model.train()
    model.generate(ids, mask, max_new_tokens=2, **kw)
    assert model.training  # mode restored
    model.eval()


def test_checkpoint_round_trip(model, tmp_path):
    path = tmp_path / "sub" / "lm.pt"
    save_checkpoint(path, model, TOK, extra={"step": 3, "note": "hi", "curve": [[0, 1.5]], "t": torch.ones(2)})
    blob = torch.load(path, weights_only=True)  # plain content only
    assert blob["config"]["d_model"] == CFG.d_model
    m2, tok2, extra = load_checkpoint(path)
    assert m2.config == CFG and not m2.training
    assert tok2.to_dict() == TOK.to_dict()
    assert extra["step"] == 3 and extra["curve"] == [[0, 1.5]] and torch.equal(extra["t"], torch.ones(2))
    ids = torch.randint(0, CFG.vocab_size, (2, 9))
    assert torch.equal(model(ids), m2(ids))
    with pytest.raises(TypeError, match="extra\\['bad'\\]"):
        save_checkpoint(path, model, TOK, extra={"bad": object()})
