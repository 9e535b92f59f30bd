//! Writes the seeded weights of the models exchanged with SpikingJelly in tests
//! (`tests/common/sj_models.rs`) as safetensors into the folder given as argument, for
//! tools/fixtures/weights.py to load into SpikingJelly:
//!     cargo run -p memopt-data --example export_seeded_weights -- /tmp/sj-weights

#[path = "../tests/common/sj_models.rs"]
mod sj_models;

use memopt_data::weights::{WeightsInfo, save_model};
use std::path::PathBuf;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = PathBuf::from(
        std::env::args()
            .nth(1)
            .ok_or("usage: export_seeded_weights DIR")?,
    );
    std::fs::create_dir_all(&dir)?;
    for (name, stem, spec) in sj_models::cases() {
        let model = sj_models::seeded_model(name, &spec);
        let path = dir.join(format!("{stem}.safetensors"));
        save_model(&path, &model, &WeightsInfo::default())?;
        println!("{}: {} parameters", path.display(), model.param_count());
    }
    Ok(())
}
