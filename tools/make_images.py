#!/usr/bin/python3
"""Writes deterministic synthetic RGB images as model inputs, one NumPy .npy file per image.

For calibrating and checking image models (ds-convert --calibration DIR, ds-compare --inputs
DIR) where no image set may be shipped: every image is drawn from a seeded generator, so the
same arguments always write the same bytes. An image is a smooth colour field (a few random
low-frequency sinusoids per channel), a handful of filled ellipses and rectangles of random
colours, and mild pixel noise, in [0, 1]; it is then normalized per channel with ImageNet's
mean (0.485, 0.456, 0.406) and standard deviation (0.229, 0.224, 0.225) and stored as float32
[1, 3, H, W] (NCHW, batch 1).

Usage: tools/make_images.py --out DIR [--count N] [--first K] [--size 224] [--seed 7]
Image i (K <= i < K + N) is named image_<i:05d>.npy and depends only on --seed and i, so
disjoint ranges (--first 0 --count 32, --first 32 --count 200) give disjoint sets.
"""

import argparse
import os
import sys

import numpy as np

MEAN = np.array([0.485, 0.456, 0.406], dtype=np.float32).reshape(3, 1, 1)
STD = np.array([0.229, 0.224, 0.225], dtype=np.float32).reshape(3, 1, 1)


def make_image(seed, index, size):
    rng = np.random.default_rng([seed, index])
    y, x = np.meshgrid(np.linspace(0.0, 1.0, size), np.linspace(0.0, 1.0, size), indexing="ij")
    img = np.empty((3, size, size), dtype=np.float64)
    for c in range(3):
        field = np.full((size, size), rng.uniform(0.2, 0.8))
        for _ in range(3):
            fx, fy = rng.uniform(0.5, 4.0, size=2)
            phase = rng.uniform(0.0, 2.0 * np.pi)
            field += rng.uniform(0.05, 0.2) * np.sin(2.0 * np.pi * (fx * x + fy * y) + phase)
        img[c] = field
    for _ in range(int(rng.integers(3, 9))):
        colour = rng.uniform(0.0, 1.0, size=3)
        cx, cy = rng.uniform(0.0, 1.0, size=2)
        rx, ry = rng.uniform(0.05, 0.3, size=2)
        if rng.uniform() < 0.5:
            mask = ((x - cx) / rx) ** 2 + ((y - cy) / ry) ** 2 <= 1.0
        else:
            mask = (np.abs(x - cx) <= rx) & (np.abs(y - cy) <= ry)
        img[:, mask] = colour.reshape(3, 1)
    img += rng.normal(0.0, 0.02, size=img.shape)
    img = np.clip(img, 0.0, 1.0).astype(np.float32)
    return ((img - MEAN) / STD).astype(np.float32)[None]


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True)
    p.add_argument("--count", type=int, default=32)
    p.add_argument("--first", type=int, default=0)
    p.add_argument("--size", type=int, default=224)
    p.add_argument("--seed", type=int, default=7)
    a = p.parse_args()
    if a.count < 1 or a.first < 0 or a.size < 8:
        sys.exit("make_images.py: --count must be >= 1, --first >= 0 and --size >= 8")
    os.makedirs(a.out, exist_ok=True)
    for i in range(a.first, a.first + a.count):
        np.save(os.path.join(a.out, "image_%05d.npy" % i), make_image(a.seed, i, a.size))
    print("make_images.py: wrote %d images %dx%d to %s" % (a.count, a.size, a.size, a.out))


if __name__ == "__main__":
    main()
