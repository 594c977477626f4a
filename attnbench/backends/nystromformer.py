"""Nyströmformer (Xiong et al. 2021, "Nyströmformer: A Nyström-Based Algorithm for
Approximating Self-Attention", AAAI): softmax attention through m landmarks.

With Q and K scaled so that scores are q.k / sqrt(d), the landmarks Q~, K~ [m, d] are the
means of m contiguous segments of the queries and keys, and

    out = softmax(Q K~^T) Z softmax(Q~ K^T) V  +  conv(V),
    Z   ~ pinv(softmax(Q~ K~^T))  (the iterative Moore-Penrose pseudo-inverse, eq. 14)

Z_0 = A^T / (||A||_1 ||A||_inf) for A = softmax(Q~ K~^T) (the paper's initialisation, per
matrix), then Z_{j+1} = Z_j (13 I - A Z_j (15 I - A Z_j (7 I - A Z_j))) / 4, `iterations`
times (6 in the paper). The invariant: with m = n landmarks (each landmark one token) and
a converged Z, out - conv(V) = A A^+ A V = softmax(Q K^T / sqrt(d)) V exactly.

Segments: for n not divisible by m, no padding: the first n mod m segments hold ceil(n/m)
tokens and the rest floor(n/m), so segment sizes differ by at most one; m is min(landmarks,
n).

conv: the paper's skip connection, a depthwise convolution of V along the sequence with one
kernel of `conv` taps per head (shared by the head's value features, zero padding, output
aligned with its input; conv must be odd), as Nyströmformer's code. Its weights are a
seeded draw of the default init of a convolution layer, U(-1/sqrt(conv), 1/sqrt(conv)) (here
they are fixed, not learnt). 0 = no convolution.

Masks (the shared rule): landmarks are the means of each segment's unmasked tokens; a segment
with no unmasked token gives no landmark (its row and column of A are zero, which the
iteration keeps zero, so Z is the pseudo-inverse over the remaining landmarks); masked keys
get no weight in softmax(Q~ K^T); masked values enter neither that product nor the
convolution; masked query rows are zero. So the output of unmasked tokens does not depend on
masked tokens at all, and masking whole segments equals dropping them.

`attention_map` is the dense n x n product of the three factors, without the convolution
(which is a separate path on V): forward = attention_map @ V + conv(V). The map is signed
(the pseudo-inverse has negative entries) and its rows need not sum to exactly one.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from attnbench.backends.cost import Cost, Shape, autograd_backward, matmul
from attnbench.backends.masking import token_mask, zero_masked_rows
from attnbench.backends.registry import (
    MAX_PARAM,
    MAX_SEED_PARAM,
    Backend,
    Param,
    int_param,
    parse_int,
    register,
)


def _conv_size(text: str) -> int:
    value = parse_int(text)
    if value < 0 or value > MAX_PARAM:
        raise ValueError(f"must be 0 (none) or an odd size in 1..{MAX_PARAM}")
    if value and value % 2 == 0:
        raise ValueError("must be 0 (none) or odd, so the output stays aligned with V")
    return value


def segment_sums(x: torch.Tensor, m: int) -> torch.Tensor:
    """Sums of x [..., n, c] over m contiguous segments of the token axis: the first n mod m
    segments hold ceil(n/m) tokens, the rest floor(n/m). Requires 1 <= m <= n."""
    n = x.shape[-2]
    size, big = divmod(n, m)
    if big == 0:
        return x.unflatten(-2, (m, size)).sum(-2)
    cut = big * (size + 1)
    head = x[..., :cut, :].unflatten(-2, (big, size + 1)).sum(-2)
    tail = x[..., cut:, :].unflatten(-2, (m - big, size)).sum(-2)
    return torch.cat([head, tail], -2)


def segment_sizes(n: int, m: int) -> torch.Tensor:
    """Tokens per segment, [m]."""
    size, big = divmod(n, m)
    return torch.tensor([size + 1] * big + [size] * (m - big))


def landmarks_of(
    x: torch.Tensor, m: int, mask: torch.Tensor | None
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Segment means [B, H, m, d] of x [B, H, n, d] over unmasked tokens, and which segments
    hold any unmasked token ([B, m] bool; None without a mask)."""
    n = x.shape[-2]
    if mask is None:
        sizes = segment_sizes(n, m).to(device=x.device, dtype=x.dtype)
        return segment_sums(x, m) / sizes[:, None], None
    weight = token_mask(mask).to(x.dtype)  # [B, 1, n, 1]
    counts = segment_sums(weight, m)  # [B, 1, m, 1]
    means = segment_sums(x * weight, m) / counts.clamp_min(1)
    return means, counts[:, 0, :, 0] > 0


def _masked_softmax(scores: torch.Tensor, keep: torch.Tensor | None) -> torch.Tensor:
    """Softmax over the last axis with the columns where `keep` [B, cols] is False given no
    weight. A finite fill, not -inf: a row with no kept column is uniform junk instead of
    NaN (forward and backward); such rows belong to entirely masked batch entries only."""
    if keep is None:
        return torch.softmax(scores, -1)
    fill = torch.finfo(scores.dtype).min
    return torch.softmax(scores.masked_fill(~keep[:, None, None, :], fill), -1)


def iterative_pinv(a: torch.Tensor, iterations: int) -> torch.Tensor:
    """Moore-Penrose pseudo-inverse of a [..., m, m] by Nyströmformer's iteration (eq. 14),
    from Z_0 = A^T / (||A||_1 ||A||_inf) (per matrix; a zero matrix gives Z = 0)."""
    eye = torch.eye(a.shape[-1], dtype=a.dtype, device=a.device)
    norm_1 = a.abs().sum(-2).amax(-1)  # largest column sum
    norm_inf = a.abs().sum(-1).amax(-1)  # largest row sum
    scale = 1.0 / (norm_1 * norm_inf).clamp_min(torch.finfo(a.dtype).tiny)
    z = a.transpose(-1, -2) * scale[..., None, None]
    for _ in range(iterations):
        az = a @ z
        z = 0.25 * z @ (13 * eye - az @ (15 * eye - az @ (7 * eye - az)))
    return z


def conv_weights(heads: int, size: int, seed: int) -> torch.Tensor:
    """The depthwise kernels [heads, size], float64 on the CPU: U(-1/sqrt(size), 1/sqrt(size)),
    the default init of a convolution with fan-in `size`, from `seed`."""
    gen = torch.Generator().manual_seed(seed)
    bound = 1.0 / math.sqrt(size)
    return (torch.rand(heads, size, generator=gen, dtype=torch.float64) * 2 - 1) * bound


def depthwise_conv(v: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """Convolve v [B, H, n, dv] along n with weight [H, c] (c odd): head h's kernel on each of
    its dv features, zero padding, out[i] = sum_t w[t] v[i + t - c // 2]."""
    heads, size = weight.shape
    kernel = weight.to(v.dtype)[:, None, :, None]  # [H, 1, c, 1]: Conv2d over (n, dv)
    # channels-last (heads innermost) takes a much faster depthwise path on the CPU than
    # the default layout does
    v = v.contiguous(memory_format=torch.channels_last)
    return F.conv2d(v, kernel, padding=(size // 2, 0), groups=heads)


def nystrom_landmarks(q, k, m: int, mask=None):
    """Q scaled by 1/sqrt(d), its landmarks Q~ and K's K~ [B, H, m, d], and which segments
    hold any unmasked token ([B, m]; None without a mask)."""
    q = q * (1.0 / math.sqrt(q.shape[-1]))
    q_land, keep = landmarks_of(q, m, mask)
    k_land, _ = landmarks_of(k, m, mask)
    return q, q_land, k_land, keep


def nystrom_kernels(q, k, q_land, k_land, keep, mask=None):
    """The three softmax kernels: softmax(Q K~^T) [B,H,n,m], A = softmax(Q~ K~^T) [B,H,m,m]
    (float32 at least: the iteration squares its conditioning), softmax(Q~ K^T) [B,H,m,n]."""
    kernel_1 = _masked_softmax(q @ k_land.transpose(-1, -2), keep)
    scores_2 = q_land @ k_land.transpose(-1, -2)
    work = torch.promote_types(scores_2.dtype, torch.float32)
    kernel_2 = _masked_softmax(scores_2.to(work), keep)
    kernel_3 = _masked_softmax(q_land @ k.transpose(-1, -2), mask)
    if keep is not None:  # a landmark without tokens: no row in A nor in softmax(Q~ K^T)
        kernel_2 = kernel_2 * token_mask(keep).to(work)
        kernel_3 = kernel_3 * token_mask(keep).to(kernel_3.dtype)
    return kernel_1, kernel_2, kernel_3


def nystrom_factors(q, k, m: int, iterations: int, mask=None):
    """The three factors: softmax(Q K~^T) [B,H,n,m], Z [B,H,m,m], softmax(Q~ K^T) [B,H,m,n]."""
    q, q_land, k_land, keep = nystrom_landmarks(q, k, m, mask)
    kernel_1, kernel_2, kernel_3 = nystrom_kernels(q, k, q_land, k_land, keep, mask)
    return kernel_1, iterative_pinv(kernel_2, iterations).to(q.dtype), kernel_3


@register
class Nystromformer(Backend):
    """Nyströmformer (Xiong et al. 2021): segment-mean landmarks, iterative pseudo-inverse,
    optional depthwise convolution of V. See the module docstring for the exact rules."""

    name = "nystromformer"
    params = {
        "landmarks": int_param(64, 1, None, "landmarks m (segment means); min(m, n) are used"),
        "conv": Param(33, _conv_size, "depthwise conv kernel of V along n (odd; 0 = none)"),
        "iterations": int_param(6, 1, 1000, "iterations of the pseudo-inverse"),
        "seed": int_param(0, 0, MAX_SEED_PARAM, "seed of the conv weights"),
    }
    complexity = "O(n m d + m^3 iterations + n conv d) time, O(n m) memory"
    summary = "Nyströmformer: landmark Nyström approximation + depthwise conv of V"
    stages = ("landmarks", "kernels", "pseudo_inverse", "products", "conv")

    def __init__(self, **values):
        super().__init__(**values)
        self._weights: dict[int, torch.Tensor] = {}

    def validate(self, case) -> None:
        """landmarks <= n and conv <= 2n - 1, the widest kernel that meets a token (or
        their defaults, chosen for long sequences and kept at short ones)."""
        n = case.n
        limit = max(n, self.params["landmarks"].default)
        self.check_at_most(
            "landmarks", limit, f"max(n, its default) at n = {n}: a token per landmark at least"
        )
        limit = max(2 * n - 1, self.params["conv"].default)
        self.check_at_most(
            "conv", limit, f"max(2n - 1, its default) at n = {n}: wider taps meet no token"
        )

    def conv_weight(self, heads: int) -> torch.Tensor | None:
        """The seeded [heads, conv] kernels (float64, CPU), or None for conv=0."""
        size = int(self.values["conv"])
        if not size:
            return None
        if heads not in self._weights:
            self._weights[heads] = conv_weights(heads, size, int(self.values["seed"]))
        return self._weights[heads]

    def landmark_count(self, n: int) -> int:
        return min(int(self.values["landmarks"]), n)

    def stages_in(self, mode: str, device: str = "cpu") -> tuple[str, ...]:
        """As `Backend.stages_in`, without "conv" when conv=0 (no convolution runs)."""
        stages = super().stages_in(mode, device)
        return stages if self.values["conv"] else tuple(s for s in stages if s != "conv")

    def forward(self, q, k, v, mask=None):
        m, iterations = self.landmark_count(k.shape[-2]), int(self.values["iterations"])
        with self.stage("landmarks"):
            q, q_land, k_land, keep = nystrom_landmarks(q, k, m, mask)
        with self.stage("kernels"):
            kernel_1, kernel_2, kernel_3 = nystrom_kernels(q, k, q_land, k_land, keep, mask)
        with self.stage("pseudo_inverse"):
            z = iterative_pinv(kernel_2, iterations).to(q.dtype)
        with self.stage("products"):
            if mask is not None:
                v = v * token_mask(mask).to(v.dtype)
            # kernel_1 (Z (kernel_3 V)): O(n m dv + m^2 dv), never an n x m by m x m product
            out = kernel_1 @ (z @ (kernel_3 @ v))
        if self.values["conv"]:
            with self.stage("conv"):
                weight = self.conv_weight(q.shape[1])
                out = out + depthwise_conv(v, weight.to(v.device))
        return zero_masked_rows(out, mask)

    def cost(self, shape: Shape) -> dict[str, Cost]:
        """With P = B H, m = min(landmarks, n) landmarks, T iterations, c conv taps:
        landmarks, 3 P n d other (scaling Q, the segment sums, the means); kernels, the three
        score products 2 P (2 n m + m^2) d matmul and their softmaxes, 5 P (2 n m + m^2), the
        scores written and read back; pseudo_inverse, 8 P T m^3 matmul (four m x m products
        an iteration), P (4 m^2 + 2 m + 7 T m^2) other (the norms and Z_0; per iteration the
        three c I - X and the 1/4), its traffic taken as 24 m^2 an iteration in float32 at
        least; products, 2 P (2 n m + m^2) dv matmul; conv, 2 P n dv c matmul (every tap,
        padding included, as the convolution computes it) and the sum with the attention
        part. Backward: `autograd_backward` of all of them, the conv kernel constant. The
        mask's work is not counted."""
        n, d, dv, size = shape.n, shape.dim, shape.dv, shape.itemsize
        m, steps = self.landmark_count(n), int(self.values["iterations"])
        work = max(size, 4)
        planes = shape.planes
        kernel_entries = 2 * n * m + m * m
        forward = {
            "landmarks": Cost(0.0, 3.0 * shape.elements(n, d), shape.bytes(3 * n * d + 2 * m * d)),
            "kernels": Cost(
                matmul(planes, n, d, m) + matmul(planes, m, d, m) + matmul(planes, m, d, n),
                5.0 * shape.elements(kernel_entries),
                shape.bytes(2 * n * d + 2 * m * d + 6 * n * m) + 3 * shape.elements(m, m) * work,
            ),
            "pseudo_inverse": Cost(
                4 * steps * matmul(planes, m, m, m),
                shape.elements(4 * m * m + 2 * m + 7 * steps * m * m),
                shape.bytes(m * m, itemsize=work) * (1 + 24 * steps) + shape.bytes(m * m),
                shape.bytes(4 * m * m, itemsize=work),
            ),
            "products": Cost(
                matmul(planes, m, n, dv) + matmul(planes, m, m, dv) + matmul(planes, n, m, dv),
                0.0,
                shape.bytes(2 * n * m + m * m + 2 * n * dv + 4 * m * dv),
            ),
        }
        taps = int(self.values["conv"])
        conv_flops = 0.0
        if taps:
            conv_flops = matmul(planes, n, taps, dv)
            forward["conv"] = Cost(
                conv_flops,
                float(shape.elements(n, dv)),
                shape.bytes(3 * n * dv) + shape.heads * taps * size,
            )
        costs = dict(forward) if shape.forward else {}
        if shape.backward:
            costs["backward"] = autograd_backward(forward.values(), conv_flops)
        return costs

    def attention_map(self, q, k, mask=None):
        """softmax(Q K~^T) Z softmax(Q~ K^T), [B, H, n, n]: the attention part (no conv)."""
        m, iterations = self.landmark_count(k.shape[-2]), int(self.values["iterations"])
        kernel_1, z, kernel_3 = nystrom_factors(q, k, m, iterations, mask)
        return (kernel_1 @ z) @ kernel_3

    def predicted_bytes(self, batch, heads, n, d, itemsize):
        m = min(int(self.values["landmarks"]), n)
        return 4 * batch * heads * n * (m + d) * itemsize  # scores and weights, both ways
