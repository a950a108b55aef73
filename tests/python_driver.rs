//! Test drivers written on the repository's Python driver helper (`examples/drivers`).

use std::path::{Path, PathBuf};

/// Writes `dir/name`, a driver on the Python helper whose `Driver` subclass has `class_body`
/// as its body; answers its path.
pub fn driver_file(dir: &Path, name: &str, class_body: &str) -> PathBuf {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/drivers");
    let path = dir.join(name);
    std::fs::write(
        &path,
        format!(
            "import sys, time\nsys.path.insert(0, {repo:?})\nfrom lanes_driver import Driver, DriverError\n\nclass TestDriver(Driver):\n{class_body}\nif __name__ == \"__main__\":\n    TestDriver.main()\n",
            repo = repo.display().to_string()
        ),
    )
    .expect("write a test driver");
    path
}
