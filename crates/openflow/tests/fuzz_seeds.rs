//! The fuzz seed corpus (`fuzz/corpus/decode`) holds one encoded example of every message
//! in every version that can express it (`seed-*` in 1.3, `v10-*`, `v14-*`, `v15-*`); this
//! test checks every seed decodes in its version and that each version's seed set is
//! complete, and rewrites the corpus when `OPENFLOW_WRITE_SEEDS=1`.

use std::path::PathBuf;

use openflow::msg::{decode_versioned, examples};

const VERSIONS: [(&str, u8); 4] = [("seed", 4), ("v10", 1), ("v14", 5), ("v15", 6)];

#[test]
fn seed_corpus_decodes_and_covers_every_example() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("fuzz/corpus/decode");
    let ex = examples();
    if std::env::var_os("OPENFLOW_WRITE_SEEDS").is_some() {
        std::fs::create_dir_all(&dir).unwrap();
        for (prefix, v) in VERSIONS {
            for (i, m) in ex.iter().enumerate() {
                if let Ok(b) = m.encode_version(v, i as u32) {
                    let name = format!("{prefix}-{i:02}-type{}", m.msg_type());
                    std::fs::write(dir.join(name), b).unwrap();
                }
            }
        }
    }
    for (prefix, v) in VERSIONS {
        let mut n = 0;
        for e in std::fs::read_dir(&dir).unwrap() {
            let path = e.unwrap().path();
            let name = path.file_name().unwrap().to_string_lossy().to_string();
            if !name.starts_with(&format!("{prefix}-")) {
                continue;
            }
            let bytes = std::fs::read(&path).unwrap();
            let (got, _, _) = decode_versioned(&bytes)
                .unwrap_or_else(|e| panic!("{} does not decode: {e}", path.display()));
            if !name.contains("type0") {
                assert_eq!(got, v, "{name}");
            }
            n += 1;
        }
        let want = ex.iter().filter(|m| m.encode_version(v, 0).is_ok()).count();
        assert_eq!(
            n, want,
            "one {prefix} seed per example that version can express"
        );
    }
}
