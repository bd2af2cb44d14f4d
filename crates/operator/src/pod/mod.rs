//! Code that runs inside the pods the operator starts rather than in the operator: the
//! member pods' `check-data` (`member_volume`) and how far a volume's WAL reaches
//! (`data_index`). The backup pods' commands are in `backup/` (`save`, `one_shot`, `fetch`).

pub mod data_index;
pub mod member_volume;
