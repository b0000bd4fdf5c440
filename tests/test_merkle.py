"""RFC 6962 Merkle tree: roots, inclusion and consistency proofs, checked against the recursive definition."""

from __future__ import annotations

import hashlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ledger.errors import ProofError
from ledger.log import (
    consistency_proof,
    inclusion_proof,
    leaf_hash,
    merkle_root,
    parse_checkpoint,
    sign_checkpoint,
    verify_consistency,
    verify_inclusion,
)
from ledger.signing import SigningKey


def mth(leaves: list[bytes]) -> bytes:
    """The RFC 6962 definition, recursively, as the oracle."""
    n = len(leaves)
    if n == 0:
        return hashlib.sha256(b"").digest()
    if n == 1:
        return leaves[0]
    k = 1
    while k * 2 < n:
        k *= 2
    return hashlib.sha256(b"\x01" + mth(leaves[:k]) + mth(leaves[k:])).digest()


def make_leaves(n: int) -> list[bytes]:
    return [leaf_hash(f"entry-{i}".encode()) for i in range(n)]


def test_leaf_and_empty_hashes_follow_rfc6962() -> None:
    assert leaf_hash(b"") == hashlib.sha256(b"\x00").digest()
    assert merkle_root([]).hex() == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"


@given(st.integers(min_value=1, max_value=300))
def test_root_matches_recursive_definition(n: int) -> None:
    leaves = make_leaves(n)
    assert merkle_root(leaves) == mth(leaves)


@settings(max_examples=200)
@given(st.integers(min_value=1, max_value=200), st.data())
def test_inclusion_proofs_verify_for_random_sizes(n: int, data: st.DataObject) -> None:
    leaves = make_leaves(n)
    i = data.draw(st.integers(min_value=0, max_value=n - 1))
    proof = inclusion_proof(i, leaves)
    root = merkle_root(leaves)
    verify_inclusion(i, n, leaves[i], proof, root)
    wrong = leaf_hash(b"not in the tree")
    with pytest.raises(ProofError):
        verify_inclusion(i, n, wrong, proof, root)
    if proof:
        bad = [bytes(32), *proof[1:]]
        with pytest.raises(ProofError):
            verify_inclusion(i, n, leaves[i], bad, root)


@settings(max_examples=200)
@given(st.integers(min_value=1, max_value=200), st.data())
def test_consistency_proofs_verify_for_random_sizes(n: int, data: st.DataObject) -> None:
    leaves = make_leaves(n)
    m = data.draw(st.integers(min_value=1, max_value=n))
    proof = consistency_proof(m, leaves)
    verify_consistency(m, n, merkle_root(leaves[:m]), merkle_root(leaves), proof)


@given(st.integers(min_value=2, max_value=120), st.data())
def test_forked_log_fails_consistency(n: int, data: st.DataObject) -> None:
    leaves = make_leaves(n)
    m = data.draw(st.integers(min_value=1, max_value=n - 1))
    forked = list(leaves)
    forked[data.draw(st.integers(min_value=0, max_value=m - 1))] = leaf_hash(b"forked")
    proof = consistency_proof(m, leaves)
    with pytest.raises(ProofError):
        verify_consistency(m, n, merkle_root(forked[:m]), merkle_root(leaves), proof)


def test_checkpoint_is_a_c2sp_signed_note() -> None:
    key = SigningKey.generate("log")
    cp = sign_checkpoint("example.org/log", 7, merkle_root(make_leaves(7)), key)
    lines = cp.note.split("\n")
    assert lines[0] == "example.org/log"
    assert lines[1] == "7"
    assert lines[3] == ""
    assert lines[4].startswith("\u2014 log ")
    parsed = parse_checkpoint(cp.note, "log", key.public)
    assert (parsed.size, parsed.root) == (7, cp.root)
    with pytest.raises(ProofError):
        parse_checkpoint(cp.note.replace("\n7\n", "\n8\n"), "log", key.public)
    with pytest.raises(ProofError):
        parse_checkpoint(cp.note, "log", SigningKey.generate("log").public)


@given(st.integers(min_value=1, max_value=160), st.data())
def test_incremental_tree_matches_definition_at_every_size(n: int, data: st.DataObject) -> None:
    from ledger.log import MerkleTree

    leaves = make_leaves(n)
    tree = MerkleTree()
    for i, leaf in enumerate(leaves):
        tree.append(leaf)
        assert tree.root() == mth(leaves[: i + 1])
    lo = data.draw(st.integers(min_value=0, max_value=n - 1))
    hi = data.draw(st.integers(min_value=lo + 1, max_value=n))
    assert tree.range_hash(lo, hi) == mth(leaves[lo:hi])
    size = data.draw(st.integers(min_value=1, max_value=n))
    index = data.draw(st.integers(min_value=0, max_value=size - 1))
    verify_inclusion(index, size, leaves[index], tree.inclusion_proof(index, size), mth(leaves[:size]))
    old = data.draw(st.integers(min_value=1, max_value=size))
    verify_consistency(old, size, mth(leaves[:old]), mth(leaves[:size]), tree.consistency_proof(old, size))
