//! Flow-key compare kernels and their instruction-set variants: comparing a key's head words
//! (and, for keys with a tail, all words), whole or under a mask, which every cache tier
//! repeats per packet.
//!
//! Owns: the [`Kernels`] trait with its two implementations, [`Scalar`] (word loops the
//! compiler turns into SSE2, the baseline every x86-64 CPU has) and, on x86-64, [`Avx512`]
//! (masked compares of eight words per instruction, straight from the keys in memory); [`Isa`],
//! the run-time choice between them; and [`dispatch`], which runs a generic burst function
//! compiled for the chosen variant. Both variants compute the same answers (the classifier and
//! EMC tests run on every variant the CPU has). The key hash is not vectorised: it folds
//! 64x64-bit products, which AVX-512 has no instruction for, and both variants share it, so
//! tables built by one are valid for the other.
//!
//! The kernels only load and compare; none builds a masked key in a vector register. A first
//! version did (for the hash), and storing it for the hash's word loads stalled store
//! forwarding: at 1M flows it cost 15 to 55 more busy cycles per packet than the scalar loops
//! (BENCHMARKS.md, *AVX-512 compare kernels*).
//!
//! An [`Avx512`] value exists only after the CPU was seen to have the instructions (run-time
//! detection), which is what makes its kernels safe to call. Threads: any (the PMD threads use
//! them on their own caches). The `unsafe` of this crate's intrinsics lives here only.
#![allow(unsafe_code)]

use wire::flow::HEAD_WORDS;
use wire::KEY_WORDS;

/// Head words.
pub type Head = [u64; HEAD_WORDS];
/// All words.
pub type Words = [u64; KEY_WORDS];

/// The per-packet key operations, one implementation per instruction set. Implementations
/// are zero-sized tokens; every method is inlined into the caller, so in a function compiled
/// by [`dispatch`] for a variant the whole burst uses that variant's instructions.
pub trait Kernels: Copy {
    /// `a == b` over the head words.
    fn eq_head(self, a: &Head, b: &Head) -> bool;
    /// `a & mask == b & mask` over the head words. With `a` a stored masked key (zero outside
    /// `mask`), this is `a == b & mask` without building `b & mask`.
    fn eq_masked_head(self, a: &Head, b: &Head, mask: &Head) -> bool;
    /// `a & mask == b & mask` over all words.
    fn eq_masked_all(self, a: &Words, b: &Words, mask: &Words) -> bool;
}

/// Word loops: the baseline.
#[derive(Clone, Copy, Debug, Default)]
pub struct Scalar;

/// Branch-free: one OR-reduction, one test.
#[inline(always)]
fn eq_words<const N: usize>(a: &[u64; N], b: &[u64; N]) -> bool {
    let mut d = 0u64;
    for i in 0..N {
        d |= a[i] ^ b[i];
    }
    d == 0
}

#[inline(always)]
fn eq_masked_words<const N: usize>(a: &[u64; N], b: &[u64; N], m: &[u64; N]) -> bool {
    let mut d = 0u64;
    for i in 0..N {
        d |= (a[i] ^ b[i]) & m[i];
    }
    d == 0
}

impl Kernels for Scalar {
    #[inline(always)]
    fn eq_head(self, a: &Head, b: &Head) -> bool {
        eq_words(a, b)
    }
    #[inline(always)]
    fn eq_masked_head(self, a: &Head, b: &Head, mask: &Head) -> bool {
        eq_masked_words(a, b, mask)
    }
    #[inline(always)]
    fn eq_masked_all(self, a: &Words, b: &Words, mask: &Words) -> bool {
        eq_masked_words(a, b, mask)
    }
}

#[cfg(target_arch = "x86_64")]
pub use x86::Avx512;

#[cfg(target_arch = "x86_64")]
mod x86 {
    use super::{Head, Kernels, Words, HEAD_WORDS, KEY_WORDS};
    use std::arch::x86_64::*;

    /// AVX-512 (F and VL): a key's words as 512-bit vectors of eight, the last vector
    /// overlapping the one before where the length is not a multiple of eight. Only
    /// [`Avx512::detect`] makes one.
    #[derive(Clone, Copy, Debug)]
    pub struct Avx512 {
        _detected: (),
    }

    impl Avx512 {
        /// The token, if this CPU has AVX-512 F and VL (and BMI2, which every such CPU has; the
        /// key hash's multiplies use it in this variant).
        pub fn detect() -> Option<Avx512> {
            let has = is_x86_feature_detected!("avx512f")
                && is_x86_feature_detected!("avx512vl")
                && is_x86_feature_detected!("bmi2");
            has.then_some(Avx512 { _detected: () })
        }
    }

    /// Word offset of vector `v` of an `N`-word array (`N >= 8`): eight words from `8 * v`,
    /// the last vector moved back so that it ends at `N` (it overlaps the one before, which a
    /// compare does not mind).
    #[inline(always)]
    const fn at<const N: usize>(v: usize) -> usize {
        if 8 * v + 8 <= N {
            8 * v
        } else {
            N - 8
        }
    }

    /// SAFETY (of the callers): the CPU has AVX-512 F (an [`Avx512`] token exists); `at`
    /// keeps the eight words inside the array.
    #[inline(always)]
    unsafe fn load<const N: usize>(p: &[u64; N], v: usize) -> __m512i {
        const { assert!(N >= 8) };
        _mm512_loadu_epi64(p.as_ptr().add(at::<N>(v)) as *const i64)
    }

    /// Lanes where `(a ^ b) & m` is non-zero, OR-ed over the vectors: zero iff equal.
    #[inline(always)]
    fn diff<const N: usize>(_: Avx512, a: &[u64; N], b: &[u64; N], m: Option<&[u64; N]>) -> bool {
        let mut d: __mmask8 = 0;
        // SAFETY: the token proves AVX-512 F; `load` stays inside the arrays.
        unsafe {
            for v in 0..N.div_ceil(8) {
                let x = _mm512_xor_si512(load(a, v), load(b, v));
                d |= match m {
                    Some(m) => _mm512_test_epi64_mask(x, load(m, v)),
                    None => _mm512_test_epi64_mask(x, x),
                };
            }
        }
        d != 0
    }

    impl Kernels for Avx512 {
        #[inline(always)]
        fn eq_head(self, a: &Head, b: &Head) -> bool {
            !diff::<HEAD_WORDS>(self, a, b, None)
        }
        #[inline(always)]
        fn eq_masked_head(self, a: &Head, b: &Head, mask: &Head) -> bool {
            !diff::<HEAD_WORDS>(self, a, b, Some(mask))
        }
        #[inline(always)]
        fn eq_masked_all(self, a: &Words, b: &Words, mask: &Words) -> bool {
            !diff::<KEY_WORDS>(self, a, b, Some(mask))
        }
    }

    /// `f` compiled with AVX-512 enabled, so the kernels inlined into it use it.
    #[target_feature(enable = "avx512f,avx512vl,bmi2")]
    pub(super) fn run<F: super::BurstFn>(f: F, k: Avx512) -> F::Output {
        f.call(k)
    }
}

/// The variant a PMD uses for its cache lookups.
#[derive(Clone, Copy, Debug)]
pub enum Isa {
    /// [`Scalar`].
    Scalar,
    /// [`Avx512`].
    #[cfg(target_arch = "x86_64")]
    Avx512(Avx512),
}

impl Isa {
    /// The best variant this CPU has.
    pub fn detect() -> Isa {
        #[cfg(target_arch = "x86_64")]
        if let Some(k) = Avx512::detect() {
            return Isa::Avx512(k);
        }
        Isa::Scalar
    }

    /// Every variant this CPU can run, the baseline first (tests run each).
    pub fn available() -> Vec<Isa> {
        let mut v = vec![Isa::Scalar];
        #[cfg(target_arch = "x86_64")]
        if let Some(k) = Avx512::detect() {
            v.push(Isa::Avx512(k));
        }
        v
    }

    /// The variant called `name` (`scalar`, `avx512`, or `auto` for [`Isa::detect`]), if this
    /// CPU has it.
    pub fn by_name(name: &str) -> Result<Isa, String> {
        match name {
            "auto" => Ok(Isa::detect()),
            "scalar" => Ok(Isa::Scalar),
            "avx512" => Isa::available()
                .into_iter()
                .find(|i| i.name() == "avx512")
                .ok_or_else(|| "this CPU has no AVX-512 F/VL".to_string()),
            other => Err(format!(
                "unknown lookup variant {other:?} (scalar, avx512, auto)"
            )),
        }
    }

    /// `scalar` or `avx512`.
    pub fn name(&self) -> &'static str {
        match self {
            Isa::Scalar => "scalar",
            #[cfg(target_arch = "x86_64")]
            Isa::Avx512(_) => "avx512",
        }
    }
}

/// A burst operation generic over the kernels (a closure cannot be generic).
pub trait BurstFn {
    /// What it returns.
    type Output;
    /// Runs it with kernels `k`. Implementations mark this `#[inline(always)]` so that it is
    /// compiled into [`dispatch`]'s variant.
    fn call<K: Kernels>(self, k: K) -> Self::Output;
}

/// Runs `f` with `isa`'s kernels, compiled for that instruction set.
#[inline(always)]
pub fn dispatch<F: BurstFn>(isa: Isa, f: F) -> F::Output {
    match isa {
        Isa::Scalar => f.call(Scalar),
        // `Avx512::detect` checks every feature `run` enables (avx512f, avx512vl, bmi2).
        #[cfg(target_arch = "x86_64")]
        // SAFETY: an `Avx512` token exists only where `detect` saw those features.
        Isa::Avx512(k) => unsafe { x86::run(f, k) },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn arr<const N: usize>(v: &[u64]) -> [u64; N] {
        let mut a = [0u64; N];
        for (i, o) in a.iter_mut().enumerate() {
            *o = v.get(i).copied().unwrap_or(0);
        }
        a
    }

    #[test]
    fn every_variant_this_cpu_has_is_tested() {
        let names: Vec<_> = Isa::available().iter().map(Isa::name).collect();
        #[cfg(target_arch = "x86_64")]
        if is_x86_feature_detected!("avx512f") && is_x86_feature_detected!("avx512vl") {
            assert_eq!(names, ["scalar", "avx512"]);
            return;
        }
        println!("NOT TESTED HERE: this CPU has no AVX-512 F/VL; only {names:?} runs");
        assert_eq!(names, ["scalar"]);
        assert!(Isa::by_name("avx512").is_err());
    }

    /// `eq_head(a, b)`, `eq_head(a, a)`, `eq_masked_head(a, b, m)`, `eq_masked_all(a, b, m)`.
    fn answers<K: Kernels>(k: K, a: &[u64], b: &[u64], m: &[u64]) -> [bool; 4] {
        let (ah, bh, mh) = (
            arr::<HEAD_WORDS>(a),
            arr::<HEAD_WORDS>(b),
            arr::<HEAD_WORDS>(m),
        );
        let (aw, bw, mw) = (
            arr::<KEY_WORDS>(a),
            arr::<KEY_WORDS>(b),
            arr::<KEY_WORDS>(m),
        );
        [
            k.eq_head(&ah, &bh),
            k.eq_head(&ah, &ah),
            k.eq_masked_head(&ah, &bh, &mh),
            k.eq_masked_all(&aw, &bw, &mw),
        ]
    }

    proptest! {
        /// Every variant agrees with plain array arithmetic, including keys that differ in one
        /// word only (the words of the overlapping last vector among them).
        #[test]
        fn variants_agree_with_array_arithmetic(
            a in proptest::collection::vec(any::<u64>(), KEY_WORDS),
            flip in 0..KEY_WORDS,
            bit in 0u32..64,
            m in proptest::collection::vec(any::<u64>(), KEY_WORDS),
        ) {
            let mut b = a.clone();
            b[flip] ^= 1 << bit;
            let masked_eq = |n: usize| (0..n).all(|i| (a[i] ^ b[i]) & m[i] == 0);
            let want = [a[..HEAD_WORDS] == b[..HEAD_WORDS], true, masked_eq(HEAD_WORDS),
                masked_eq(KEY_WORDS)];
            for isa in Isa::available() {
                let got = match isa {
                    Isa::Scalar => answers(Scalar, &a, &b, &m),
                    #[cfg(target_arch = "x86_64")]
                    Isa::Avx512(k) => answers(k, &a, &b, &m),
                };
                prop_assert_eq!(got, want, "variant {}", isa.name());
            }
        }
    }
}
