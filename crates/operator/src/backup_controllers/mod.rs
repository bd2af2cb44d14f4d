//! The backup controllers: EtcdBackup (`backup_controller`) and EtcdRestore
//! (`restore_controller`), run by `jobs` (watches, the job pods, their context). They observe
//! and execute around the pure planners of `backup/` (`backup_planner`, `restore_planner`).

pub mod backup_controller;
pub mod jobs;
pub mod restore_controller;
