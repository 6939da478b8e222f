"""Distillation and mutual-learning baselines of DBL's Table II: DR, RKD, DML, DINO, DINO*.

Diao et al., "Deep Boosting Learning" (``dbl.txt``), Sec. IV-B "Comparison with Deep
Cooperative Learning": the baselines are run "under their original training settings" with
"some refinements to be more suitable for cross-modal tasks". **For DR and RKD the predicted
similarity scores are distilled directly; for DML and DINO, which imitate probability outputs,
the cross-modal projection of CMPM [62] turns each row (column) of the batch similarity matrix
into a probability distribution over the batch's captions (images)**, every pair being a class.
DINO* swaps the two arguments of DINO's cross-entropy. Everything else follows the cited works;
each class says what it keeps and what it had to choose.

All of these are :class:`~itrlab.methods.dbl.cooperative_loss.CooperativeLoss` es: ``forward(target,
anchor)`` with the anchor detached. Which branch is the anchor is the scheme's business (DBL
Sec. III-D): a frozen, trained teacher (OAS: DR, RKD), a co-trained peer (OSS: DML, which the
scheme calls twice with the roles swapped), or an EMA of the target (MSS: DINO, DINO*).

Notation: ``S`` is the target's ``i2t`` matrix, ``A`` the anchor's. Each loss has two
directions: ``i2t`` (image queries, row ``i`` of ``S`` holds image ``i``'s candidate captions)
and ``t2i`` (caption queries, column ``j`` holds caption ``j``'s candidate images).

Image ids: none of these losses uses labels (they transfer the anchor's relations or
distributions over *all* in-batch candidates), so no entry is a positive or a negative and a
second caption of the same image is treated like any other candidate. Ids are only checked to
be the same in both branches (same batch).

Reduction: **mean** over the queries of each direction (the cited works average over the
batch: RKD's and DINO's reference code, DML's per-sample KL, DarkRank's list mean); the two
directions are added, and ``parts`` holds each direction's mean. Note that DBL's task loss
(VSE++) and boosting losses are sums over the batch; a scheme that adds these terms at 1:1
therefore weighs them 1/B of a summed term, as in the cited works' own settings.
"""

from __future__ import annotations

import itertools

import torch
from torch import Tensor

from itrlab.losses.base import LossOutput, Similarities
from itrlab.methods.dbl.cooperative_loss import CooperativeLoss, register_cooperative_loss
from itrlab.methods.dbl.loss_settings import MAX_LIST_LEN, RkdRelations  # noqa: F401  (the settings' bounds)

# Squared distances are clamped here before the square root (RKD's reference ``pdist``): the
# root stays differentiable, and a clamped entry (a self- or duplicate-pair) gets no gradient.
DISTANCE_EPS = 1e-12


def squared_distance(similarity: Tensor) -> Tensor:
    """``||x - y||^2 = 2 - 2 s`` of unit vectors with similarity ``s``, clamped at ``DISTANCE_EPS``.

    The similarity-to-distance map of unit embeddings (cosine similarity); for other scores
    (interaction models) it is the same monotone map, which keeps their ranking.
    """
    return (2.0 - 2.0 * similarity).clamp(min=DISTANCE_EPS)


def _directions(matrix: Tensor) -> tuple[Tensor, Tensor]:
    """The query-by-candidate views of an ``i2t`` matrix: rows (``i2t``) and columns (``t2i``)."""
    return matrix, matrix.T


def _output(i2t: Tensor, t2i: Tensor) -> LossOutput:
    """Per-query terms of both directions -> mean over queries, directions added."""
    i2t_loss, t2i_loss = i2t.mean(), t2i.mean()
    return LossOutput(loss=i2t_loss + t2i_loss, parts={"i2t": i2t_loss.detach(), "t2i": t2i_loss.detach()})


# --------------------------------------------------------------------------- DR


def plackett_luce_log_prob(scores: Tensor, perms: Tensor) -> Tensor:
    """``log P(pi | x)`` of every permutation in ``perms`` (DarkRank eq. 1, Plackett-Luce).

    ``P(pi | x) = prod_{i=1}^{n} exp(x_{pi(i)}) / sum_{k=i}^{n} exp(x_{pi(k)})``.

    Args:
        scores: (Q, n) one list of ``n`` scores per query.
        perms: (P, n) permutations of ``range(n)``.

    Returns:
        (Q, P) log-probabilities.
    """
    ordered = scores[:, perms]  # (Q, P, n): ordered[q, p, i] = x_{pi_p(i)}
    tails = torch.logcumsumexp(ordered.flip(-1), dim=-1).flip(-1)  # log sum_{k >= i} exp(.)
    return (ordered - tails).sum(dim=-1)


@register_cooperative_loss
class SoftDarkRankLoss(CooperativeLoss):
    """DR: DarkRank soft transfer (Chen, Wang & Zhang, AAAI 2018 [30]; DBL "DR (softrank)").

    DarkRank scores each candidate ``x`` of a query ``q`` by ``S(x) = -alpha ||q - x||^beta``
    and compares the teacher's and the student's Plackett-Luce distributions over the
    permutations ``pi`` of a candidate list (eq. 1 and the soft transfer loss)::

        L_soft = KL(P(pi | X_t) || P(pi | X_s))
               = sum_pi P(pi | X_t) (log P(pi | X_t) - log P(pi | X_s))

    Cross-modal form (DBL: "we directly utilize the predicted similarity scores"): the query
    is an image (a caption), its candidates are the batch's captions (images), and the
    distance comes from the similarity score ``s`` as for unit embeddings,
    ``||q - x||^2 = 2 - 2 s``, so ``S = -alpha (2 - 2 s)^(beta / 2)``; the teacher ``X_t`` is
    the anchor, the student ``X_s`` the target.

    Choices the papers leave open: the soft transfer sums over ``n!`` permutations, so (as
    in DarkRank's public implementations) the list of each query is the anchor's
    ``list_len`` highest-scoring candidates (the query itself is not a candidate across
    modalities, so nothing is skipped), ``list_len = 4`` by default; ``alpha = beta = 3``
    as in those implementations. Reduction: mean over queries of each direction, directions
    added (see the module docstring).

    Args:
        alpha: scale of the score function (> 0).
        beta: power of the distance in the score function (> 0).
        list_len: candidates per list, an integer in ``[2, 7]`` (used as ``min(list_len, B)``).
    """

    name = "dr"
    reduction = "mean"

    def __init__(self, alpha: float, beta: float, list_len: int):
        super().__init__()
        self.alpha, self.beta, self.list_len = alpha, beta, list_len

    def score(self, similarity: Tensor) -> Tensor:
        """DarkRank's ``S(x) = -alpha ||q - x||^beta`` with ``||q - x||^2 = 2 - 2 s``."""
        return -self.alpha * squared_distance(similarity).pow(self.beta / 2)

    def soft_transfer(self, target: Tensor, anchor: Tensor) -> Tensor:
        """(Q,) KL between the anchor's and the target's permutation distributions, per query."""
        n = min(self.list_len, anchor.shape[1])
        target_scores, anchor_scores = self.score(target), self.score(anchor)
        top = anchor_scores.topk(n, dim=1).indices  # the anchor's best n candidates per query
        perms = torch.tensor(list(itertools.permutations(range(n))), device=top.device)
        log_p_anchor = plackett_luce_log_prob(anchor_scores.gather(1, top), perms)
        log_p_target = plackett_luce_log_prob(target_scores.gather(1, top), perms)
        return (log_p_anchor.exp() * (log_p_anchor - log_p_target)).sum(dim=1)

    def compare(self, target: Similarities, anchor: Similarities) -> LossOutput:
        terms = [self.soft_transfer(t, a) for t, a in zip(_directions(target.i2t), _directions(anchor.i2t))]
        return _output(*terms)

    def extra_repr(self) -> str:
        return f"alpha={self.alpha}, beta={self.beta}, list_len={self.list_len}"


# --------------------------------------------------------------------------- RKD


def huber(x: Tensor) -> Tensor:
    """RKD's Huber loss ``l_delta`` of a difference ``x`` (delta = 1): smooth L1."""
    magnitude = x.abs()
    return torch.where(magnitude <= 1.0, 0.5 * x * x, magnitude - 0.5)


@register_cooperative_loss
class RelationalDistanceLoss(CooperativeLoss):
    """RKD: distance-wise relational knowledge distillation (Park et al., CVPR 2019 [32]).

    RKD-D matches the normalised pairwise distances of the teacher ``t`` and the student
    ``s`` over the pairs ``X^2`` of the batch::

        psi_D(t_i, t_j) = ||t_i - t_j|| / mu,   mu = mean over (i, j) in X^2 of ||t_i - t_j||
        L_RKD-D = mean over (i, j) in X^2 of l_delta(psi_D(t_i, t_j), psi_D(s_i, s_j))

    with ``l_delta`` the Huber loss (delta = 1), each branch normalised by its own ``mu``
    (the student's ``mu`` carries gradient, as in RKD's code). Distances come from the
    similarity scores as for unit embeddings, ``d = sqrt(2 - 2 s)`` (squared distance
    clamped at ``1e-12``); the anchor is the teacher, the target the student.

    Choices (DBL: "we directly utilize the predicted similarity scores"):

    * ``relations="i2t"`` (default): ``X^2`` = the ``B x B`` image-caption pairs of ``i2t``,
      the predicted scores themselves; works for every method, interaction models included.
    * ``relations="all"``: RKD's original "all pairs of the batch's embeddings" over the
      ``2B`` embeddings (images and captions): the ordered pairs ``i != j`` of the joint
      distance matrix ``[[i2i, i2t], [t2i, t2t]]`` (image-caption pairs counted in both
      orders). Reads ``i2i`` / ``t2t``, so such an instance ``requires`` them.

    RKD's angle-wise term (RKD-A) is not included: DBL compares "RKD (distance)". The sum in
    RKD's loss is a mean here, as in RKD's reference code. Parts: the contribution of each
    block (``i2t``, and ``i2i`` / ``t2t`` for ``"all"``); they add up to the loss.

    Args:
        relations: ``"i2t"`` or ``"all"``.
    """

    name = "rkd"
    reduction = "mean"

    def __init__(self, relations: str):
        super().__init__()
        self.relations = relations
        # Per instance: only the "all" form reads the same-modality similarities.
        self.requires = ("i2i", "t2t") if relations == "all" else ()

    @staticmethod
    def joint_distances(sims: Similarities, relations: str) -> tuple[Tensor, Tensor]:
        """The distance matrix the relations are taken from and the mask of its pairs ``X^2``."""
        cross = squared_distance(sims.i2t).sqrt()
        if relations == "i2t":
            return cross, torch.ones_like(cross, dtype=torch.bool)
        images, captions = squared_distance(sims.i2i).sqrt(), squared_distance(sims.t2t).sqrt()
        joint = torch.cat([torch.cat([images, cross], dim=1), torch.cat([cross.T, captions], dim=1)], dim=0)
        return joint, ~torch.eye(joint.shape[0], dtype=torch.bool, device=joint.device)

    def compare(self, target: Similarities, anchor: Similarities) -> LossOutput:
        student, pairs = self.joint_distances(target, self.relations)
        teacher, _ = self.joint_distances(anchor, self.relations)
        count = pairs.sum()
        psi_student = student / student[pairs].mean()
        psi_teacher = teacher / teacher[pairs].mean()
        cost = torch.where(pairs, huber(psi_student - psi_teacher), torch.zeros_like(student)) / count
        if self.relations == "i2t":
            loss = cost.sum()
            return LossOutput(loss=loss, parts={"i2t": loss.detach()})
        size = target.batch_size
        parts = {
            "i2t": cost[:size, size:].sum() + cost[size:, :size].sum(),
            "i2i": cost[:size, :size].sum(),
            "t2t": cost[size:, size:].sum(),
        }
        return LossOutput(loss=cost.sum(), parts={k: v.detach() for k, v in parts.items()})

    def extra_repr(self) -> str:
        return f"relations={self.relations!r}"


# --------------------------------------------------------------------------- DML


@register_cooperative_loss
class MutualLearningLoss(CooperativeLoss):
    """DML: deep mutual learning's mimicry term (Zhang et al., CVPR 2018 [25]).

    Network ``Theta_1`` learns from its peer's predictions ``p_2`` with
    ``D_KL(p_2 || p_1) = sum_m p_2^m log(p_2^m / p_1^m)``; the scheme adds its task loss and
    calls this loss again with the roles swapped for the peer. Cross-modal form (DBL, after
    CMPM [62]): each pair of the batch is a class; image ``i``'s prediction is the softmax
    over the batch's captions, caption ``j``'s the softmax over the batch's images::

        p_t(i) = softmax_j(S[i, j] / tau),    p_a(i) = softmax_j(A[i, j] / tau)
        l_i2t(i) = KL(p_a(i) || p_t(i))       (and the same over columns for t2i)

    ``p_1`` is the target, ``p_2`` the (detached) anchor; the loss is 0 when the two branches
    agree. Choice: a temperature ``tau`` (DML's class logits need none, but cosine scores in
    [-1, 1] would give near-uniform distributions), default 0.1 like DINO's student
    temperature and itrlab's contrastive losses. Reduction: mean over queries, directions
    added.

    Args:
        tau: softmax temperature of both branches (> 0).
    """

    name = "dml"
    reduction = "mean"
    mutual = True  # both branches learn: the scheme calls it with the roles swapped for the peer

    def __init__(self, tau: float):
        super().__init__()
        self.tau = tau

    def compare(self, target: Similarities, anchor: Similarities) -> LossOutput:
        terms = []
        for t, a in zip(_directions(target.i2t), _directions(anchor.i2t)):
            log_p_target = torch.log_softmax(t / self.tau, dim=1)
            log_p_anchor = torch.log_softmax(a / self.tau, dim=1)
            terms.append((log_p_anchor.exp() * (log_p_anchor - log_p_target)).sum(dim=1))
        return _output(*terms)

    def extra_repr(self) -> str:
        return f"tau={self.tau}"


# --------------------------------------------------------------------------- DINO, DINO*


@register_cooperative_loss
class DinoLoss(CooperativeLoss):
    """DINO: self-distillation from an EMA teacher (Caron et al., ICCV 2021 [28]).

    DINO trains the student on ``H(P_t, P_s) = -sum P_t log P_s`` with
    ``P_s = softmax(g_s / tau_s)`` and the centred, sharpened teacher
    ``P_t = softmax((g_t - c) / tau_t)``. Cross-modal form (DBL, after CMPM [62]): the
    "output dimensions" are the batch's candidates, image ``i``'s outputs are its row of
    similarities and caption ``j``'s its column::

        P_s(i) = softmax_j(S[i, j] / tau_s)
        P_t(i) = softmax_j((A[i, j] - c_j) / tau_t),   c_j = mean_i' A[i', j]
        l_i2t(i) = H(P_t(i), P_s(i))                    (and the same over columns for t2i)

    with the anchor ``A`` the EMA teacher (the scheme updates it: DBL's MSS) and ``S`` the
    student (target).

    Kept from DINO: the student / teacher temperatures (defaults DINO's ``tau_s = 0.1``,
    ``tau_t = 0.04``; DINO's warm-up of ``tau_t`` to 0.07 is a schedule the scheme may apply
    by setting ``tau_t``) and centring. Changed: DINO's centre is a running EMA (momentum
    0.9) of the teacher's batch-mean output per output dimension; here the output dimensions
    are in-batch candidate slots, which mean a different caption (image) in every batch, so
    no running centre can carry over: ``c`` is the current batch's mean of the teacher
    outputs (``center=False`` turns centring off). Dropped: multi-crop views (image and
    caption are the two "views" here). Reduction: mean over queries, directions added.

    Args:
        tau_s: student temperature (> 0).
        tau_t: teacher temperature (> 0).
        center: subtract the batch-mean teacher output before sharpening.
    """

    name = "dino"
    reduction = "mean"

    def __init__(self, tau_s: float, tau_t: float, center: bool):
        super().__init__()
        self.tau_s, self.tau_t, self.center = tau_s, tau_t, center

    def log_distributions(self, target: Tensor, anchor: Tensor) -> tuple[Tensor, Tensor]:
        """Row-wise ``(log P_s, log P_t)`` of one direction (queries as rows)."""
        if self.center:
            anchor = anchor - anchor.mean(dim=0, keepdim=True)  # c: mean teacher output over the batch
        return torch.log_softmax(target / self.tau_s, dim=1), torch.log_softmax(anchor / self.tau_t, dim=1)

    @staticmethod
    def cross_entropy(log_p_student: Tensor, log_p_teacher: Tensor) -> Tensor:
        """(Q,) DINO's ``H(P_t, P_s) = -sum P_t log P_s`` per query."""
        return -(log_p_teacher.exp() * log_p_student).sum(dim=1)

    def compare(self, target: Similarities, anchor: Similarities) -> LossOutput:
        terms = [
            self.cross_entropy(*self.log_distributions(t, a))
            for t, a in zip(_directions(target.i2t), _directions(anchor.i2t))
        ]
        return _output(*terms)

    def extra_repr(self) -> str:
        return f"tau_s={self.tau_s}, tau_t={self.tau_t}, center={self.center}"


@register_cooperative_loss
class DinoStarLoss(DinoLoss):
    """DINO*: DINO with the cross-entropy's arguments swapped (DBL Sec. IV-B, Table II).

    DBL "employ[s] ``H(P_s(x), P_t(x))`` to replace ``H(P_t(x), P_s(x))`` in Eq. (3) of DINO",
    since the latter "could blur the distributions of multiple modes" (CMPM [62])::

        l_i2t(i) = H(P_s(i), P_t(i)) = -sum_j P_s(i)_j log P_t(i)_j

    ``P_s`` and ``P_t`` exactly as in :class:`DinoLoss` (same parameters and defaults); the
    gradient reaches the target only through ``P_s`` (the teacher is detached).
    """

    name = "dino_star"

    @staticmethod
    def cross_entropy(log_p_student: Tensor, log_p_teacher: Tensor) -> Tensor:
        """(Q,) DINO*'s ``H(P_s, P_t) = -sum P_s log P_t`` per query."""
        return -(log_p_student.exp() * log_p_teacher).sum(dim=1)
