//! The fuzz seed corpus (`fuzz/corpus/decode`) holds one encoded example of every message;
//! this test checks every seed decodes, and rewrites the corpus when
//! `OPENFLOW_WRITE_SEEDS=1`.

use std::path::PathBuf;

use openflow::msg::{decode, examples};

#[test]
fn seed_corpus_decodes_and_covers_every_example() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("fuzz/corpus/decode");
    let ex = examples();
    if std::env::var_os("OPENFLOW_WRITE_SEEDS").is_some() {
        std::fs::create_dir_all(&dir).unwrap();
        for (i, m) in ex.iter().enumerate() {
            let name = format!("seed-{i:02}-type{}", m.msg_type());
            std::fs::write(dir.join(name), m.encode(i as u32).unwrap()).unwrap();
        }
    }
    let mut n = 0;
    for e in std::fs::read_dir(&dir).unwrap() {
        let path = e.unwrap().path();
        if !path
            .file_name()
            .unwrap()
            .to_string_lossy()
            .starts_with("seed-")
        {
            continue;
        }
        let bytes = std::fs::read(&path).unwrap();
        assert!(decode(&bytes).is_ok(), "{} does not decode", path.display());
        n += 1;
    }
    assert_eq!(n, ex.len(), "one seed per example");
}
