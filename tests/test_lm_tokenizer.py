"""CharTokenizer and pad_batch."""

import pytest
import torch

from workbook.lm import CharTokenizer, generate_reviews, pad_batch


@pytest.fixture(scope="module")
def tok():
    return CharTokenizer()


def test_round_trip_on_corpus_text(tok):
    for r in generate_reviews(300, seed=0):
        ids = tok.encode(r.text, add_bos=True, add_eos=True)
        assert ids[0] == tok.bos_id and ids[-1] == tok.eos_id
        assert tok.decode(ids) == r.text
        assert tok.decode(torch.tensor(ids)) == r.text


def test_specials_are_distinct_and_pad_is_not_eos(tok):
    assert len({tok.pad_id, tok.bos_id, tok.eos_id}) == 3
    assert tok.pad_id != tok.eos_id
    ids = tok.encode("ab", add_bos=True, add_eos=True)
    assert ids == [tok.bos_id, *tok.encode("ab", add_bos=False), tok.eos_id]
    assert tok.pad_id not in ids
    assert tok.decode([tok.pad_id, *ids, tok.pad_id], skip_special=False) == "<pad><bos>ab<eos><pad>"
    assert tok.decode([tok.pad_id, *ids, tok.pad_id]) == "ab"


def test_vocab_is_small_and_fixed(tok):
    assert tok.vocab_size == 3 + len(tok.alphabet) <= 48
    assert all(0 <= i < tok.vocab_size for i in tok.encode("the movie, i'd say: fine!? -;"))
    # Built from a constant, so ids never depend on data.
    assert CharTokenizer().encode("hello") == tok.encode("hello")
    assert CharTokenizer.from_dict(tok.to_dict()).encode("the plot.") == tok.encode("the plot.")


def test_unknown_character_is_named_in_the_error(tok):
    with pytest.raises(ValueError, match="'Q'"):
        tok.encode("the Quiet film")
    with pytest.raises(ValueError, match="out of range"):
        tok.decode([tok.vocab_size])
    with pytest.raises(ValueError, match="1-D"):
        tok.decode(torch.zeros(2, 2, dtype=torch.long))


def test_pad_batch_left_and_right():
    seqs = [[5, 6, 7], [8], torch.tensor([9, 10])]
    ids, mask = pad_batch(seqs, side="left", pad_id=0)
    assert ids.tolist() == [[5, 6, 7], [0, 0, 8], [0, 9, 10]]
    assert mask.tolist() == [[1, 1, 1], [0, 0, 1], [0, 1, 1]]
    ids, mask = pad_batch(seqs, side="right", pad_id=0)
    assert ids.tolist() == [[5, 6, 7], [8, 0, 0], [9, 10, 0]]
    assert mask.tolist() == [[1, 1, 1], [1, 0, 0], [1, 1, 0]]
    assert ids.dtype == mask.dtype == torch.long


def test_pad_batch_rejects_bad_input():
    with pytest.raises(ValueError, match="side"):
        pad_batch([[1]], side="middle", pad_id=0)
    with pytest.raises(ValueError, match="1-D"):
        pad_batch([torch.zeros(2, 2, dtype=torch.long)], side="left", pad_id=0)
    with pytest.raises(ValueError, match="integer"):
        pad_batch([torch.zeros(2)], side="left", pad_id=0)
    with pytest.raises(ValueError, match="at least one"):
        pad_batch([], side="left", pad_id=0)
