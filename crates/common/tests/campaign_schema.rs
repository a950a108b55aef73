//! `docs/campaign.schema.json` is the schema generated from the types, byte for byte. Write it
//! anew with `LANES_WRITE_SCHEMA=1 cargo test -p lanes-common --test campaign_schema`.

use std::path::PathBuf;

#[test]
fn the_published_schema_is_the_generated_one() {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../docs/campaign.schema.json");
    let generated =
        serde_json::to_string_pretty(&lanes_common::spec::json_schema()).unwrap() + "\n";
    if std::env::var_os("LANES_WRITE_SCHEMA").is_some() {
        std::fs::write(&path, &generated).unwrap();
    }
    let published = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        published == generated,
        "{} is not the schema the types generate; write it anew with \
         LANES_WRITE_SCHEMA=1 cargo test -p lanes-common --test campaign_schema",
        path.display()
    );
}
