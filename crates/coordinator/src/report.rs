//! The campaign report from a store: a fold over the whole ledger, read page by page, so a
//! campaign of any size is reported in full without holding its rows at once.

use lanes_common::ids::CampaignId;
use lanes_report::{Report, ReportBuilder};

use crate::store::{Store, StoreError};

/// Rows read per page.
const PAGE: usize = 10_000;

/// Builds the report of campaign `id` from every row of its ledger.
pub async fn build(store: &dyn Store, id: &CampaignId) -> Result<Report, StoreError> {
    let campaign = store.campaign(id).await?;
    let mut builder = ReportBuilder::new();
    loop {
        let page = store.rows(id, builder.rows(), PAGE).await?;
        if page.is_empty() {
            break;
        }
        for row in &page {
            builder.add(row);
        }
    }
    Ok(builder.finish(&campaign))
}
