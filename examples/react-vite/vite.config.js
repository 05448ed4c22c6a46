import react from "@vitejs/plugin-react";
import { defineConfig } from "vite";

// What `npm create vite` writes for React: agentwire needs nothing here.
export default defineConfig({
  plugins: [react()],
});
