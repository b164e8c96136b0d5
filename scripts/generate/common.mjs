// Helpers shared by the generation peer harnesses (ort_generate.mjs, llama_cpp_bench.mjs): the
// command line's counts and prompts, the seeded generator of random prompts, and quantiles.

// A non-negative integer option value, or an error naming the option.
export function count(flag, text) {
  const v = Number(text);
  if (!Number.isInteger(v) || v < 0) throw new Error(`${flag}: not a count: ${text}`);
  return v;
}

// "1,2,3;4,5" -> [[1, 2, 3], [4, 5]]: non-negative integer token ids, empty prompts dropped.
export function parsePrompts(text, flag = '--prompts') {
  return text.split(';').filter((p) => p.trim()).map((p) => p.split(',')
    .filter((t) => t.trim()).map((t) => {
      const v = Number(t);
      if (!Number.isInteger(v) || v < 0) throw new Error(`${flag}: not a token id: ${t}`);
      return v;
    }));
}

// mulberry32, as the peer harness's input generator (../shared/peers/common.mjs).
export function rng(seed) {
  let s = seed >>> 0;
  return () => {
    s = (s + 0x6D2B79F5) >>> 0;
    let t = s;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

// The q-quantile of values by linear interpolation (0.5: the median); null when empty.
export function quantile(values, q) {
  const s = [...values].sort((x, y) => x - y);
  if (s.length === 0) return null;
  const pos = (s.length - 1) * q, lo = Math.floor(pos), hi = Math.ceil(pos);
  return s[lo] + (s[hi] - s[lo]) * (pos - lo);
}
