"""NumPy references shared by the frontend tests' generators (the .pt2 and
the ONNX ones), in float64."""
import numpy as np


def conv1d_reference(x, w, bias, stride, pad_low, pad_high, dilation, groups):
    """x [N, C, T], w [O, C / groups, K], bias [O] or None: torch's conv1d
    (ONNX's Conv over one dim) with pads pad_low before and pad_high after."""
    n, c, length = x.shape
    o, _, k = w.shape
    xp = np.pad(x, ((0, 0), (0, 0), (pad_low, pad_high)))
    steps = (length + pad_low + pad_high - dilation * (k - 1) - 1) // stride + 1
    out = np.zeros((n, o, steps))
    per, outs = c // groups, o // groups
    for oc in range(o):
        g = oc // outs
        for t in range(steps):
            for kk in range(k):
                window = xp[:, g * per:(g + 1) * per, t * stride + kk * dilation]
                out[:, oc, t] += window @ w[oc, :, kk]
    return out if bias is None else out + bias[None, :, None]
