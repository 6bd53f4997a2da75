"""The attention fingerprints of ``foundry bench --digests`` on the device (foundry_bench/serving/stacksite/
foundry_attention_digests.py): the same bits give the same fingerprint whatever the layout they are read from, and
one element one bf16 step off gives another."""

from __future__ import annotations

from foundry_bench.serving.stacksite.foundry_attention_digests import fingerprint


def test_a_fingerprint_is_of_the_bits_and_one_step_in_one_element_changes_it() -> None:
    import torch

    torch.manual_seed(0)
    x = torch.randn(740, 8, 256, device="cuda", dtype=torch.bfloat16)
    same = x.clone()
    step = x.clone()
    flat = step.view(-1).view(torch.int16)
    flat[12345] += 1  # the next bf16 value of one element: one last-bit difference
    assert fingerprint(x) == fingerprint(same)
    assert fingerprint(x) != fingerprint(step)
    assert fingerprint(x)[0] == 740 * 8 * 256
    # a transposed view holds the same values in another layout: fingerprinted as its values, in its own order
    t = x.transpose(0, 1)
    assert fingerprint(t) == fingerprint(t.contiguous())
    # two elements swapped: the plain sum cannot tell, the weighted one does
    swapped = x.clone().view(-1)
    swapped[[0, 1]] = swapped[[1, 0]]
    if not torch.equal(swapped[:2], x.view(-1)[:2]):
        assert fingerprint(swapped.view_as(x)) != fingerprint(x)
    assert fingerprint(None) is None
    assert fingerprint(torch.ones(4, device="cuda", dtype=torch.float32))[0] == 4
